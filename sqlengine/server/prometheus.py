"""The Prometheus text exposition (``GET /v0/metrics``) of the server's and every pipeline's counters."""
from __future__ import annotations

from typing import Dict, List

from .registry import Manager


def _label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus(mgr: Manager) -> str:
    """The Prometheus text exposition of every pipeline's counters."""
    series: Dict[str, tuple] = {}   # metric -> (type, help, [(labels, value)])

    def add(metric: str, kind: str, help_: str, labels: dict, value) -> None:
        if value is None:
            return
        series.setdefault(metric, (kind, help_, []))[2].append((labels, value))

    add("sqlengine_http_requests_total", "counter", "HTTP requests received", {}, mgr.http_requests)
    add("sqlengine_egress_overflows_total", "counter", "egress subscribers disconnected for falling behind", {},
        mgr.egress_overflows)
    with mgr.lock:
        entries = list(mgr.entries.values())
    for e in entries:
        pl = {"pipeline": e.name}
        state = e.state()
        for s in ("created", "running", "paused", "stopped", "failed"):
            add("sqlengine_pipeline_state", "gauge", "1 for the pipeline's current state", {**pl, "state": s},
                int(state == s))
        add("sqlengine_pipeline_failed", "gauge", "1 if the pipeline failed", pl, int(state == "failed"))
        for t, n in e.ingress_requests.items():
            add("sqlengine_ingress_requests_total", "counter", "ingress requests per table", {**pl, "table": t}, n)
        for t, n in e.ingress_bytes.items():
            add("sqlengine_ingress_bytes_total", "counter", "ingress body bytes per table", {**pl, "table": t}, n)
        add("sqlengine_ingress_errors_total", "counter", "rejected ingress requests", pl, e.ingress_errors)
        for v, f in e.fanouts.items():
            add("sqlengine_egress_subscribers", "gauge", "connected egress streams", {**pl, "view": v},
                len(f.subscribers()))
        p = e.pipeline
        if p is None:
            continue
        try:
            st = p.status()
        except Exception:  # noqa: BLE001
            continue
        add("sqlengine_pipeline_step", "gauge", "the last committed step", pl, st.get("step"))
        merges = st.get("state_merges", {})
        add("sqlengine_state_merges_total", "counter", "background merges of state runs put in place", pl,
            merges.get("installed"))
        add("sqlengine_state_merge_stalls_total", "counter", "steps that waited for a background merge", pl,
            merges.get("stalls"))
        add("sqlengine_state_merge_running", "gauge", "1 while a background merge of state runs runs", pl,
            None if not merges else int(merges.get("running", False)))
        ops = st.get("spark_step_ops", {})
        add("sqlengine_spark_step_ops_on_driver_total", "counter",
            "ops of Spark steps run on the driver, where their changes were", pl, ops.get("on_driver"))
        add("sqlengine_spark_step_ops_declined_total", "counter",
            "ops of Spark steps whose state reads were too wide for the driver (run on Spark)", pl,
            ops.get("declined"))
        for t, n in st.get("rows_in", {}).items():
            add("sqlengine_table_rows_in_total", "counter", "rows (weight units) processed per table",
                {**pl, "table": t}, n)
        for v, n in st.get("rows_out", {}).items():
            add("sqlengine_view_rows_out_total", "counter", "changed rows output per view", {**pl, "view": v}, n)
        for q, key in (("0.5", "p50"), ("0.99", "p99")):
            add("sqlengine_step_latency_ms", "summary", "step latency (last 1000 steps)", {**pl, "quantile": q},
                st.get("step_latency_ms", {}).get(key))
        add("sqlengine_step_latency_last_ms", "gauge", "latency of the last step", pl,
            st.get("step_latency_ms", {}).get("last"))
        add("sqlengine_backlog_batches", "gauge", "logged input batches not yet processed", pl,
            st.get("backlog_batches"))
        for v, n in (st.get("errors") or {}).items():
            if isinstance(n, (int, float)):
                add("sqlengine_view_row_errors_total", "counter", "rows that failed in a view's expressions",
                    {**pl, "view": v}, n)
        for t, n in (st.get("dead_letter_rows") or {}).items():
            add("sqlengine_dead_letter_rows_total", "counter", "dead-lettered input rows", {**pl, "table": t}, n)
        for c, cs in (st.get("connectors") or {}).items():
            cl = {**pl, "connector": c, "kind": str(cs.get("kind"))}
            add("sqlengine_connector_rows_total", "counter", "rows read (source) or written (sink)", cl,
                cs.get("rows"))
            add("sqlengine_connector_errors_total", "counter", "connector errors", cl,
                cs.get("errors") if isinstance(cs.get("errors"), (int, float)) else None)
        add("sqlengine_pipeline_error", "gauge", "1 if the pipeline has an error", pl, int(bool(st.get("error"))))
    lines: List[str] = []
    for metric, (kind, help_, points) in series.items():
        lines.append(f"# HELP {metric} {help_}")
        lines.append(f"# TYPE {metric} {kind}")
        for labels, value in points:
            lab = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(f"{metric}{{{lab}}} {value}" if lab else f"{metric} {value}")
    return "\n".join(lines) + "\n"
