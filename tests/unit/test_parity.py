"""flo_redis has the public shape of flo-python 0.1.2's action, worker, stream and queue
API, under the same module paths.

Every name below is looked up in ``flo`` (the reference SDK) and in flo_redis,
and the two are compared:

* functions and methods: parameter names, kinds, order and defaults match
  flo's as a prefix (flo_redis may add trailing parameters, each with a
  default); async-ness and static/class/property kind match;
* dataclasses: public fields in order, with equal defaults and equivalent
  types, as a prefix (flo_redis may add trailing fields with defaults); the
  same frozenness;
* enums: every flo member exists with an equal value;
* exceptions: the same subclass relations among all the exceptions listed,
  the same non-flo bases, the same constructor and class-level defaults;
* constants: equal values.

A name flo_redis doesn't have yet fails with a message saying where it is expected.

Module paths: every module a flo user imports (``flo.client``, ``flo.worker``, ...) exists
as ``flo_redis.<same name>`` and holds every public name flo defines there — the same
object flo_redis exports elsewhere — except the names of what flo-redis leaves out on
purpose (OUT_OF_SCOPE, each with its reason), so renaming the package in imports is the
whole migration.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any

import flo
import pytest

# -----------------------------------------------------------------------------
# What to compare
# -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Api:
    """One public name: where flo defines it and where flo_redis should."""

    flo_module: str  # e.g. "flo.types"
    name: str
    ours: str  # flo_redis submodule expected to define it

    @property
    def id(self) -> str:
        return f"{self.flo_module.removeprefix('flo.')}.{self.name}"


def _apis(flo_module: str, ours: str, names: str) -> list[Api]:
    return [Api(flo_module, name, ours) for name in names.split()]


ACTION_WORKER_API: list[Api] = [
    *_apis(
        "flo.types",
        "flo_redis.types",
        """
        RunStatus WorkerStatus WorkerType ActionType StatusCode Ran Reason
        MAX_BLOCK_MS MAX_NAMESPACE_SIZE MAX_KEY_SIZE
        ActionRegisterOptions ActionInvokeOptions ActionStatusOptions ActionListOptions
        ActionDeleteOptions ActionInvokeResult ActionRunStatus ActionInfo ActionListResult
        WorkerRegisterOptions WorkerAwaitOptions WorkerTouchOptions WorkerCompleteOptions
        WorkerFailOptions WorkerListOptions WorkerAwaitResult TaskAssignment WorkerInfo
        WorkerListResult
        """,
    ),
    *_apis(
        "flo.exceptions",
        "flo_redis.errors",
        """
        FloError NonRetryableError NotConnectedError ConnectionFailedError
        InvalidEndpointError UnexpectedEofError RequestTimeoutError ProtocolError
        InvalidMagicError TableMismatchError InvalidChecksumError PayloadTooLargeError
        IncompleteResponseError ValidationError NamespaceTooLargeError KeyTooLargeError
        ValueTooLargeError BlockTooLongError ServerError NotFoundError BadRequestError
        ConflictError UnauthorizedError OverloadedError RateLimitedError UnavailableError
        InternalServerError GenericServerError is_connection_error
        """,
    ),
    *_apis("flo.retry", "flo_redis.retry", "RetryPolicy DEFAULT_RETRY_POLICY is_refused_unrun"),
    *_apis("flo.client", "flo_redis.client", "FloClient"),
    *_apis("flo.actions", "flo_redis.actions", "ActionOperations WorkerOperations"),
]

STREAM_API: list[Api] = [
    *_apis(
        "flo.types",
        "flo_redis.types",
        """
        StreamID StorageTier StreamRecord StreamAppendOptions StreamReadOptions
        StreamTrimOptions StreamInfoOptions StreamGroupJoinOptions StreamGroupReadOptions
        StreamGroupAckOptions StreamGroupNackOptions StreamAppendResult StreamReadResult
        StreamInfo StreamTrimResult PendingEntry StreamClaimResult
        """,
    ),
    *_apis("flo.streams", "flo_redis.streams", "StreamOperations"),
]

QUEUE_API: list[Api] = [
    *_apis(
        "flo.types",
        "flo_redis.types",
        """
        Message DequeueResult EnqueueOptions DequeueOptions AckOptions NackOptions
        DlqListOptions DlqRequeueOptions PeekOptions
        """,
    ),
    *_apis("flo.queue", "flo_redis.queue", "QueueOperations"),
]

WORKER_CLASSES: list[Api] = _apis(
    "flo.worker",
    "flo_redis.worker",
    """
    ActionWorker ActionWorkerOptions ActionContext ActionResult
    StreamWorker StreamWorkerOptions StreamContext
    """,
)

ALL_API = ACTION_WORKER_API + STREAM_API + QUEUE_API + WORKER_CLASSES

# The members of plain classes to compare (dataclass fields are compared anyway).
MEMBERS: dict[str, list[str]] = {
    "FloClient": [
        "__init__",
        "connect",
        "close",
        "reconnect",
        "is_connected",
        "interrupt",
        "namespace",
        "get_namespace",
        "new_action_worker",
        "new_stream_worker",
        "__aenter__",
        "__aexit__",
    ],
    "ActionOperations": ["register", "invoke", "status", "list", "delete"],
    "WorkerOperations": [
        "register",
        "heartbeat",
        "await_task",
        "touch",
        "complete",
        "fail",
        "list",
    ],
    "StreamOperations": [
        "append",
        "read",
        "info",
        "trim",
        "group_join",
        "group_leave",
        "group_read",
        "group_pending",
        "group_claim",
        "group_ack",
        "group_nack",
    ],
    "QueueOperations": ["enqueue", "dequeue", "ack", "nack", "dlq_list", "dlq_requeue", "peek"],
    "ActionWorker": [
        "__init__",
        "action",
        "register_action",
        "start",
        "stop",
        "close",
        "__aenter__",
        "__aexit__",
    ],
    "StreamWorker": ["__init__", "start", "stop", "close", "__aenter__", "__aexit__"],
    "ActionContext": [
        "input",
        "json",
        "into",
        "to_bytes",
        "touch",
        "cancelled",
        "check_cancelled",
        "result",
    ],
    "StreamContext": ["stream_id", "payload", "headers", "json", "into"],
    "ActionResult": ["__init__"],
    "StreamID": ["to_bytes", "from_bytes"],
    "StatusCode": ["message"],
    "RetryPolicy": [],
}

EXCEPTION_NAMES = [
    api.name
    for api in ALL_API
    if api.flo_module == "flo.exceptions" and inspect.isclass(getattr(flo.exceptions, api.name))
]

# -----------------------------------------------------------------------------
# Lookup
# -----------------------------------------------------------------------------


def flo_object(api: Api) -> Any:
    return getattr(importlib.import_module(api.flo_module), api.name)


def our_object(api: Api) -> Any:
    """The flo_redis counterpart of ``api``; fails the test, with where it is
    expected, if there is none.

    Names flo exports at top level (FloClient, the workers) are looked up on
    ``flo_redis`` first; everything is then looked up in its submodule.
    """
    problems: list[str] = []
    if api.name in flo.__all__ and not api.ours.endswith((".types", ".errors", ".retry")):
        try:
            top = importlib.import_module("flo_redis")
        except Exception as exc:
            problems.append(f"import flo_redis failed: {exc!r}")
        else:
            if hasattr(top, api.name):
                return getattr(top, api.name)
            problems.append(f"flo_redis has no top-level {api.name}")
    try:
        module = importlib.import_module(api.ours)
    except Exception as exc:
        problems.append(f"import {api.ours} failed: {exc!r}")
    else:
        if hasattr(module, api.name):
            return getattr(module, api.name)
        problems.append(f"{api.ours} has no {api.name}")
    pytest.fail(
        f"MISSING in flo_redis: {api.name} (flo's {api.flo_module}.{api.name}); "
        + "; ".join(problems),
        pytrace=False,
    )


# -----------------------------------------------------------------------------
# Comparison helpers
# -----------------------------------------------------------------------------

_FACTORY_SENTINEL = dataclasses._HAS_DEFAULT_FACTORY  # type: ignore[attr-defined]


def same_value(ref: Any, ours: Any) -> bool:
    """Whether a flo default and a flo_redis default are the same value."""
    if ref is inspect.Parameter.empty or ours is inspect.Parameter.empty:
        return ref is ours
    if ref is _FACTORY_SENTINEL or ours is _FACTORY_SENTINEL:
        return ref is ours
    if isinstance(ref, enum.Enum):
        return (
            isinstance(ours, enum.Enum)
            and type(ref).__name__ == type(ours).__name__
            and ref.name == ours.name
            and ref.value == ours.value
        )
    if dataclasses.is_dataclass(ref) and not isinstance(ref, type):
        if not (dataclasses.is_dataclass(ours) and not isinstance(ours, type)):
            return False
        return type(ref).__name__ == type(ours).__name__ and all(
            same_value(getattr(ref, f.name), getattr(ours, f.name)) for f in dataclasses.fields(ref)
        )
    return type(ref) is type(ours) and bool(ref == ours)


def _signature(obj: Any) -> inspect.Signature | None:
    """obj's signature; None for a builtin one (an exception class that keeps
    BaseException's ``__init__``)."""
    try:
        return inspect.signature(obj)
    except ValueError:
        return None


def compare_signatures(where: str, ref: Any, ours: Any) -> list[str]:
    """Differences between flo's signature and ours, where ours may add
    trailing parameters that have defaults."""
    ref_sig, our_sig = _signature(ref), _signature(ours)
    if ref_sig is None or our_sig is None:
        if (ref_sig is None) != (our_sig is None):
            return [f"{where}: ours is {our_sig}, flo's is {ref_sig} (builtin if None)"]
        return []
    ref_params = list(ref_sig.parameters.values())
    our_params = list(our_sig.parameters.values())
    problems: list[str] = []
    for i, rp in enumerate(ref_params):
        if i >= len(our_params):
            problems.append(f"{where}: missing parameter {rp.name!r} (position {i})")
            continue
        op = our_params[i]
        if op.name != rp.name:
            problems.append(f"{where}: parameter {i} is {op.name!r}, flo's is {rp.name!r}")
        elif op.kind != rp.kind:
            problems.append(f"{where}: parameter {rp.name!r} is {op.kind}, flo's is {rp.kind}")
        elif not same_value(rp.default, op.default):
            problems.append(
                f"{where}: parameter {rp.name!r} defaults to {op.default!r}, "
                f"flo's to {rp.default!r}"
            )
    for op in our_params[len(ref_params) :]:
        if op.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        if op.default is inspect.Parameter.empty:
            problems.append(f"{where}: extra parameter {op.name!r} has no default")
        if op.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL):
            problems.append(f"{where}: extra parameter {op.name!r} is {op.kind}")
    return problems


def _member_kind(owner: type, name: str) -> str:
    raw = inspect.getattr_static(owner, name)
    if isinstance(raw, property):
        return "property"
    if isinstance(raw, staticmethod):
        return "staticmethod"
    if isinstance(raw, classmethod):
        return "classmethod"
    if callable(raw):
        return "async method" if inspect.iscoroutinefunction(raw) else "method"
    return "attribute"


def compare_members(ref_cls: type, our_cls: type, names: list[str]) -> list[str]:
    problems: list[str] = []
    for name in names:
        where = f"{ref_cls.__name__}.{name}"
        try:
            inspect.getattr_static(our_cls, name)
        except AttributeError:
            problems.append(f"{where}: missing")
            continue
        ref_kind, our_kind = _member_kind(ref_cls, name), _member_kind(our_cls, name)
        if ref_kind != our_kind:
            problems.append(f"{where}: is a {our_kind}, flo's is a {ref_kind}")
            continue
        if ref_kind in ("method", "async method", "staticmethod", "classmethod"):
            problems += compare_signatures(where, getattr(ref_cls, name), getattr(our_cls, name))
    return problems


def _type_shape(tp: Any) -> Any:
    """A comparable, module-independent description of a type annotation."""
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return ("union", frozenset(_type_shape(a) for a in typing.get_args(tp)))
    if origin is not None:
        args = tuple(_type_shape(a) for a in typing.get_args(tp))
        return (getattr(origin, "__name__", repr(origin)), *args)
    if tp is type(None) or tp is None:
        return "None"
    if tp is Any:
        return "Any"
    return getattr(tp, "__name__", repr(tp))


def _hints(cls: type) -> dict[str, Any] | None:
    try:
        return typing.get_type_hints(cls)
    except Exception:
        return None  # unresolvable (e.g. TYPE_CHECKING-only imports): types not compared


def compare_dataclasses(ref_cls: type, our_cls: type) -> list[str]:
    name = ref_cls.__name__
    if not dataclasses.is_dataclass(our_cls):
        return [f"{name}: flo's is a dataclass, ours isn't"]
    problems: list[str] = []
    ref_frozen = ref_cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    our_frozen = our_cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    if ref_frozen != our_frozen:
        problems.append(f"{name}: frozen={our_frozen}, flo's frozen={ref_frozen}")
    ref_fields = [f for f in dataclasses.fields(ref_cls) if not f.name.startswith("_")]
    our_fields = [f for f in dataclasses.fields(our_cls) if not f.name.startswith("_")]
    ref_hints, our_hints = _hints(ref_cls), _hints(our_cls)
    for i, rf in enumerate(ref_fields):
        if i >= len(our_fields):
            problems.append(f"{name}: missing field {rf.name!r} (position {i})")
            continue
        of = our_fields[i]
        if of.name != rf.name:
            problems.append(f"{name}: field {i} is {of.name!r}, flo's is {rf.name!r}")
            continue
        if not same_value(rf.default, of.default) and not (
            rf.default is dataclasses.MISSING and of.default is dataclasses.MISSING
        ):
            problems.append(f"{name}.{rf.name}: default {of.default!r}, flo's {rf.default!r}")
        ref_factory = rf.default_factory is not dataclasses.MISSING
        our_factory = of.default_factory is not dataclasses.MISSING
        if ref_factory != our_factory:
            problems.append(f"{name}.{rf.name}: default_factory differs from flo's")
        if ref_hints is not None and our_hints is not None:
            ref_t, our_t = _type_shape(ref_hints[rf.name]), _type_shape(our_hints[of.name])
            if ref_t != our_t:
                problems.append(f"{name}.{rf.name}: type {our_t}, flo's {ref_t}")
    for of in our_fields[len(ref_fields) :]:
        if of.default is dataclasses.MISSING and of.default_factory is dataclasses.MISSING:
            problems.append(f"{name}: extra field {of.name!r} has no default")
    return problems


def compare_enums(ref_cls: type[enum.Enum], our_cls: Any) -> list[str]:
    name = ref_cls.__name__
    if not (inspect.isclass(our_cls) and issubclass(our_cls, enum.Enum)):
        return [f"{name}: flo's is an Enum, ours isn't"]
    problems: list[str] = []
    if issubclass(ref_cls, int) != issubclass(our_cls, int):
        problems.append(f"{name}: int-ness differs from flo's")
    for member in ref_cls:
        if member.name not in our_cls.__members__:
            problems.append(f"{name}.{member.name}: missing")
        elif our_cls[member.name].value != member.value:
            problems.append(
                f"{name}.{member.name} = {our_cls[member.name].value!r}, flo's = {member.value!r}"
            )
    return problems


def compare_exceptions(ref_cls: type, our_cls: Any) -> list[str]:
    name = ref_cls.__name__
    if not (inspect.isclass(our_cls) and issubclass(our_cls, BaseException)):
        return [f"{name}: flo's is an exception class, ours isn't"]
    problems: list[str] = []
    errors = importlib.import_module("flo_redis.errors")
    # Relations to every other listed exception, both ways.
    for other in EXCEPTION_NAMES:
        ref_other = getattr(flo.exceptions, other)
        our_other = getattr(errors, other, None)
        if our_other is None:
            continue  # reported by that name's own case
        if issubclass(ref_cls, ref_other) != issubclass(our_cls, our_other):
            rel = "is" if issubclass(ref_cls, ref_other) else "is not"
            problems.append(f"{name}: flo's {rel} a subclass of {other}, ours differs")
    # Bases outside flo (Exception, asyncio.TimeoutError, ...).
    for base in ref_cls.__mro__:
        if not base.__module__.startswith("flo") and not issubclass(our_cls, base):
            problems.append(f"{name}: not a subclass of {base.__module__}.{base.__qualname__}")
    problems += compare_signatures(f"{name}.__init__", ref_cls, our_cls)
    for attr, value in vars(ref_cls).items():
        if attr.startswith("_") or callable(value):
            continue
        if not same_value(value, getattr(our_cls, attr, inspect.Parameter.empty)):
            problems.append(f"{name}.{attr}: {getattr(our_cls, attr, None)!r}, flo's {value!r}")
    return problems


def compare(api: Api) -> list[str]:
    ref = flo_object(api)
    ours = our_object(api)
    if inspect.isclass(ref) and issubclass(ref, enum.Enum):
        return compare_enums(ref, ours) + compare_members(ref, ours, MEMBERS.get(api.name, []))
    if inspect.isclass(ref) and issubclass(ref, BaseException):
        return compare_exceptions(ref, ours)
    if inspect.isclass(ref):
        if not inspect.isclass(ours):
            return [f"{api.name}: flo's is a class, ours is {type(ours).__name__}"]
        problems: list[str] = []
        if dataclasses.is_dataclass(ref):
            problems += compare_dataclasses(ref, ours)
        elif dataclasses.is_dataclass(ours):
            problems.append(f"{api.name}: ours is a dataclass, flo's isn't")
        return problems + compare_members(ref, ours, MEMBERS.get(api.name, []))
    if callable(ref):
        if not callable(ours):
            return [f"{api.name}: flo's is callable, ours isn't"]
        problems = compare_signatures(api.name, ref, ours)
        if inspect.iscoroutinefunction(ref) != inspect.iscoroutinefunction(ours):
            problems.append(f"{api.name}: async-ness differs from flo's")
        return problems
    # A constant.
    return [] if same_value(ref, ours) else [f"{api.name} = {ours!r}, flo's = {ref!r}"]


# -----------------------------------------------------------------------------
# Tests
# -----------------------------------------------------------------------------


def _params(apis: list[Api]) -> list[Any]:
    return [pytest.param(api, id=api.id) for api in apis]


@pytest.mark.parametrize("api", _params(ACTION_WORKER_API))
def test_action_worker_api_matches_flo(api: Api) -> None:
    problems = compare(api)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("api", _params(STREAM_API))
def test_stream_api_matches_flo(api: Api) -> None:
    problems = compare(api)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("api", _params(QUEUE_API))
def test_queue_api_matches_flo(api: Api) -> None:
    problems = compare(api)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("api", _params(WORKER_CLASSES))
def test_worker_classes_match_flo(api: Api) -> None:
    problems = compare(api)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("api", _params([api for api in ALL_API if api.name in flo.__all__]))
def test_exported_at_top_level_like_flo(api: Api) -> None:
    """What ``from flo import X`` finds, ``from flo_redis import X`` finds too,
    and it is the same object as in its submodule."""
    top = importlib.import_module("flo_redis")
    if not hasattr(top, api.name):
        pytest.fail(f"MISSING: flo_redis/__init__.py does not export {api.name}", pytrace=False)
    sub = importlib.import_module(api.ours)
    assert getattr(top, api.name) is getattr(sub, api.name, None), (
        f"flo_redis.{api.name} is not {api.ours}.{api.name}"
    )


def test_the_lists_cover_the_brief() -> None:
    """Sanity: the lists hold every name flo defines for these areas, once."""
    names = [api.name for api in ALL_API]
    assert len(names) == len(set(names))
    for api in ALL_API:
        assert hasattr(importlib.import_module(api.flo_module), api.name), api.id
    for cls_name in MEMBERS:
        assert cls_name in names, cls_name


def test_action_result_holds_outcome_and_data() -> None:
    """ActionResult is a plain slotted class: positional (outcome, data)."""
    api = next(api for api in WORKER_CLASSES if api.name == "ActionResult")
    result = our_object(api)("approved", b"{}")
    assert (result.outcome, result.data) == ("approved", b"{}")


# -----------------------------------------------------------------------------
# Module paths: renaming the package in imports is the whole migration
# -----------------------------------------------------------------------------

MODULE_PATHS = ["client", "worker", "actions", "streams", "exceptions", "retry", "types", "queue"]


def _words(text: str) -> list[str]:
    return text.split()


_WIRE = "flo's binary wire protocol, which flo-redis does not speak (it speaks RESP to Redis)"
_KV = "client.kv is out of scope (README: Migrating from flo)"
OUT_OF_SCOPE: dict[str, str] = {
    **dict.fromkeys(
        _words("HEADER_SIZE MAGIC VERSION TABLE_HASH OpCode OptionTag raise_for_status"), _WIRE
    ),
    **dict.fromkeys(
        _words("""
        Condition DeleteOptions GetOptions GetResult GetJsonResult HistoryOptions IncrResult
        KVBeginResult KVCommitResult KVExistsOptions KVExpireOptions KVIncrOptions
        KVJsonOptions KVMGetOptions MGetEntry PutOptions PutResult ScanOptions ScanResult
        VersionEntry WaitFor MAX_KV_VALUE_SIZE MAX_WAIT_MS
        """),
        _KV,
    ),
}
_OUT_OF_SCOPE_PREFIXES = {
    "Workflow": "client.workflow is out of scope (README: Migrating from flo)",
    "Processing": "client.processing is out of scope (README: Migrating from flo)",
}


def flo_public_names(module_name: str) -> list[str]:
    """The names a user imports from flo's ``module_name``: the classes and functions it
    defines, and its upper-case constants."""
    module = importlib.import_module(f"flo.{module_name}")
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj) or isinstance(obj, typing.TypeVar):
            continue
        if name == "TYPE_CHECKING":
            continue
        defined_here = getattr(obj, "__module__", None) == module.__name__
        constant = name.isupper() and isinstance(obj, int | str | float)
        if defined_here or constant:
            names.append(name)
    return sorted(names)


def _out_of_scope(name: str) -> str | None:
    if name in OUT_OF_SCOPE:
        return OUT_OF_SCOPE[name]
    for prefix, reason in _OUT_OF_SCOPE_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None


@pytest.mark.parametrize("module_name", MODULE_PATHS)
def test_every_flo_module_path_exists_with_its_public_names(module_name: str) -> None:
    ours = importlib.import_module(f"flo_redis.{module_name}")
    top = importlib.import_module("flo_redis")
    missing, different = [], []
    for name in flo_public_names(module_name):
        if _out_of_scope(name):
            continue
        if not hasattr(ours, name):
            missing.append(name)
        elif hasattr(top, name) and getattr(top, name) is not getattr(ours, name):
            different.append(name)
    assert not missing, f"flo_redis.{module_name} lacks flo's {missing}"
    assert not different, f"flo_redis.{module_name}.{different} are not flo_redis's exports"


def test_the_module_path_lists_cover_flos_user_modules() -> None:
    """Every flo module left out of MODULE_PATHS is wire protocol (wire, kv_body) or an
    out-of-scope area (kv, kv_txn, workflows, processing)."""
    left_out = {"kv", "kv_body", "kv_txn", "workflows", "processing", "wire"}
    flo_modules = {m.name for m in __import__("pkgutil").iter_modules(flo.__path__)}
    assert flo_modules == set(MODULE_PATHS) | left_out


def test_the_clients_operation_groups_are_flos() -> None:
    """``client.queue`` (and the other groups flo-redis serves) are there, of flo's type
    names, before connecting, as on flo's client."""
    from flo_redis import FloClient

    ref = flo.FloClient("localhost:9000")
    ours = FloClient("redis://localhost:6379")
    for group in ("queue", "stream", "action", "worker"):
        assert type(getattr(ours, group)).__name__ == type(getattr(ref, group)).__name__
    for group in ("kv", "workflow", "processing"):
        assert hasattr(ref, group) and not hasattr(ours, group), group
