"""``flo-redis acl ROLE [--namespace NS]``: the ``ACL SETUSER`` line of a role
(:mod:`flo_redis.ops.roles`), for redis-cli. It prints; it changes nothing."""

from __future__ import annotations

import click

from flo_redis.cli._ops import json_option, report
from flo_redis.errors import ValidationError
from flo_redis.ops.roles import ROLES, setuser_line


def register(group: click.Group) -> None:
    group.add_command(acl)


@click.command("acl")
@click.argument("role", type=click.Choice(list(ROLES)))
@click.option(
    "--namespace",
    default=None,
    help="Narrow the role to this namespace (every role but admin). Default: every namespace.",
)
@click.option("--user", default=None, help="The ACL user's name. Default: flo-ROLE.")
@json_option
def acl(role: str, namespace: str | None, user: str | None, as_json: bool) -> None:
    """Print the ACL SETUSER line for a ROLE user: admin, worker, producer, operator or
    read-only. Run it in redis-cli with the password put in place of ROLE-PASSWORD;
    it starts with `reset`, so running it again leaves exactly these rights."""
    try:
        line = setuser_line(role, namespace, user)
    except ValidationError as exc:
        raise click.UsageError(str(exc)) from exc
    report(as_json, line, role=role, namespace=namespace, setuser=line)
