"""The PromQL metric-name scanner the monitoring tests rely on (tests/support/promql_names.py):
it finds every metric an expression reads and takes nothing else for one."""

from __future__ import annotations

import pytest
from promql_names import metric_names, served_names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("flo_redis_exporter_up == 0", {"flo_redis_exporter_up"}),
        ("absent(flo_redis_exporter_up)", {"flo_redis_exporter_up"}),
        (
            'sum by (action, le) (rate(x_bucket{action=~"$action", a="}"}[$__rate_interval]))',
            {"x_bucket"},
        ),
        ("sum without (le) (a) + count(b offset 5m) / on (ns) group_left (z) c", {"a", "b", "c"}),
        ("histogram_quantile(0.99, sum(rate(h_bucket[5m])) by (le)) > 5", {"h_bucket"}),
        ("a > 0 and on (namespace, action) b == 0 unless bool c or vector(0)", {"a", "b", "c"}),
        ('{__name__="by_name", job="x"}', {"by_name"}),
        ("topk(3, d) * 1e3 + .5 + 0x1F", {"d"}),
        ('label_values(runs{namespace=~"$namespace"}, action)', {"runs"}),
        ("sum(rate(q{l='it\\'s'}[${window}]))", {"q"}),
    ],
)
def test_it_finds_the_metrics_an_expression_reads(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def test_a_page_serves_its_samples_and_what_its_families_declare() -> None:
    page = (
        "# HELP jobs_total Jobs.\n# TYPE jobs_total counter\n"
        "# HELP wait_seconds Wait.\n# TYPE wait_seconds histogram\n"
        '# HELP up_now Up.\n# TYPE up_now gauge\nup_now{a="b"} 1.0\n'
    )
    sampled, declared = served_names(page)
    assert sampled == {"up_now"}
    assert {"jobs_total", "wait_seconds_bucket", "wait_seconds_sum", "up_now"} <= declared
