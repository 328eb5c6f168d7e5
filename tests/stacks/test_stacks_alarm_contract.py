"""Every CloudWatch alarm reads data the deployed gateway actually writes.

The cluster alarms read namespace `InferenceGateway`, dimension `Cluster`; in the cluster
the only writer is the picker (`igw picker --emf-interval --emf-cluster`), whose records
come from `inference_gateway.telemetry.emf.cluster_record`. So each alarm's metrics are
checked against a record built by that function, and the rendered picker Deployment must
ask for records under the very Cluster value the alarms filter on. CloudWatch matches a
metric by namespace, name and the exact dimension set (CloudWatch docs, "Metrics
concepts: Dimensions": "CloudWatch treats each unique combination of dimensions as a
separate metric"), so a differing name, namespace or dimension means an alarm without
data.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inference_gateway.telemetry.emf import (
    CLUSTER_METRICS,
    FLEET_METRICS,
    Snapshot,
    cluster_record,
    fleet_record,
    interval_values,
)

from .conftest import Synth

GITOPS = Path(__file__).resolve().parents[2] / "gitops" / "environments"


def _emitted(record: dict[str, Any]) -> tuple[str, frozenset[str], set[str]]:
    """(namespace, dimension names, metric names) of one EMF record, as CloudWatch reads it."""
    (directive,) = record["_aws"]["CloudWatchMetrics"]
    (dimensions,) = directive["Dimensions"]
    return directive["Namespace"], frozenset(dimensions), {m["Name"] for m in directive["Metrics"]}


def _alarm_metrics(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm reads: its own, or those under its metric-math expression."""
    props = alarm["Properties"]
    if "MetricName" in props:
        return [props]
    return [q["MetricStat"]["Metric"] for q in props["Metrics"] if "MetricStat" in q]


def _picker(env_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rendered picker Deployment and its `picker` container (the pod also runs the
    tokenizer sidecars of the precise prefix scorer)."""
    path = GITOPS / env_name / "rendered" / "20-picker.k8s.yaml"
    (deployment,) = [
        d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment"
    ]
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "picker"
    ]
    return deployment, container


def _picker_args(env_name: str) -> list[str]:
    return list(_picker(env_name)[1]["args"])


def _flag(args: list[str], name: str) -> str:
    assert name in args, f"the picker is not run with {name}"
    return args[args.index(name) + 1]


def test_every_alarm_reads_a_metric_the_gateway_emits(any_synth: Synth) -> None:
    """Each alarm's namespace, metric name and dimension set is one the picker's (or, for
    the fleet, the global router's) EMF record carries, and the dimension value is the
    cluster (environment) the writer is told to report as."""
    cluster = any_synth.env.cluster.name
    args = _picker_args(any_synth.name)
    assert float(_flag(args, "--emf-interval")) > 0
    assert _flag(args, "--emf-cluster") == cluster
    emitted = {
        "cluster": (
            _emitted(cluster_record(cluster, dict.fromkeys(CLUSTER_METRICS, 1.0), 0)),
            cluster,
        ),
        "fleet": (
            _emitted(fleet_record(any_synth.env.name, dict.fromkeys(FLEET_METRICS, 1.0), 0)),
            any_synth.env.name,
        ),
    }
    by_namespace = {e[0][0]: e for e in emitted.values()}
    read = 0
    for region in any_synth.env.aws.regions:
        alarms = any_synth.resources(region, "observability", "AWS::CloudWatch::Alarm")
        assert alarms
        for logical_id, alarm in alarms.items():
            for metric in _alarm_metrics(alarm):
                namespace = metric["Namespace"]
                assert namespace in by_namespace, f"{logical_id}: nobody writes {namespace}"
                (_, dimension_names, names), value = by_namespace[namespace]
                assert metric["MetricName"] in names, f"{logical_id}: {metric['MetricName']}"
                dimensions = {d["Name"]: d["Value"] for d in metric["Dimensions"]}
                assert frozenset(dimensions) == dimension_names, logical_id
                assert set(dimensions.values()) == {value}, logical_id
                read += 1
    assert read >= len(CLUSTER_METRICS)


def test_ready_pods_low_does_not_page_a_cluster_with_nothing_deployed(any_synth: Synth) -> None:
    """Before the workloads sync no picker writes, so there is no ReadyPods datapoint;
    "breaching" would page from the first minute (CloudWatch docs, "Configuring how
    CloudWatch alarms treat missing data"). A running picker always writes ReadyPods
    (0 in an outage), so the outage still pages. Rates and TTFT have no sample in a
    minute without requests: not breaching."""
    cluster = any_synth.env.cluster.name
    expected = {
        "ReadyPodsLow": "missing",
        "KvCacheHigh": "notBreaching",
        "ErrorRateHigh": "notBreaching",
        "TtftP99High": "notBreaching",
        "RateLimitedHigh": "notBreaching",
    }
    for region in any_synth.env.aws.regions:
        alarms = any_synth.resources(region, "observability", "AWS::CloudWatch::Alarm")
        by_name = {a["Properties"]["AlarmName"]: a["Properties"] for a in alarms.values()}
        for alarm_id, treat in expected.items():
            assert by_name[f"{cluster}-{alarm_id}"]["TreatMissingData"] == treat, alarm_id
    # A picker with no ready pod: ReadyPods is written (0, so the alarm sees it), KV is not.
    idle = interval_values(Snapshot(), Snapshot())
    assert idle["ready_pods"] == 0
    assert "kv_cache" not in idle


def _sections(config: str) -> list[tuple[str, dict[str, str]]]:
    """A Fluent Bit classic-mode config as (section, {key: value}) pairs."""
    sections: list[tuple[str, dict[str, str]]] = []
    for line in config.splitlines():
        line = line.strip()
        if line.startswith("["):
            sections.append((line.strip("[]"), {}))
        elif line:
            key, _, value = line.partition(" ")
            sections[-1][1][key] = value.strip()
    return sections


def test_the_pickers_emf_lines_reach_cloudwatch_as_metrics(any_synth: Synth) -> None:
    """CloudWatch Logs turns a log event into metrics only when `_aws` is a root member
    of its JSON (CloudWatch docs, "Embedded metric format specification"); the add-on's
    own Fluent Bit pipeline nests a container's JSON under `log_processed` (chart
    amazon-cloudwatch-observability, `application-log.conf`: `Merge_Log_Key`). So the
    add-on runs one more pipeline: it tails the picker's container log (kubelet's file
    name `<pod>_<namespace>_<container>-<id>.log`), keeps the lines an EmfEmitter
    writes, merges their JSON at the root, and ships them as `json/emf` into a log group
    the agent's role may write."""
    import fnmatch
    import io
    import json
    import re

    from prometheus_client import CollectorRegistry

    from inference_gateway.telemetry.emf import EmfEmitter

    addons = any_synth.resources(any_synth.env.aws.region, "cluster", "AWS::EKS::Addon")
    (agent,) = [
        a["Properties"]
        for a in addons.values()
        if a["Properties"]["AddonName"] == "amazon-cloudwatch-observability"
    ]
    extra = json.loads(agent["ConfigurationValues"])["containerLogs"]["fluentBit"]["config"]
    sections = _sections(extra["extraFiles"]["igw-emf.conf"])
    by_name = {(kind, body.get("Name")): body for kind, body in sections}
    tail = by_name[("INPUT", "tail")]
    deployment, container = _picker(any_synth.name)
    namespace = deployment["metadata"]["namespace"]
    picker_file = (
        f"/var/log/containers/{deployment['metadata']['name']}-7d9f8b6c5d-x2x7k_{namespace}_"
        f"{container['name']}-{'a' * 64}.log"
    )
    other_file = (
        f"/var/log/containers/vllm-llama-8b-a10g-5c6d7-abcde_{namespace}_vllm-{'b' * 64}.log"
    )
    patterns = tail["Path"].split(",")
    wanted_files = [picker_file]
    for routers in sorted((GITOPS / any_synth.name / "global").glob("*/*.k8s.yaml")):
        (router,) = [
            d for d in yaml.safe_load_all(routers.read_text()) if d and d["kind"] == "Deployment"
        ]
        (box,) = router["spec"]["template"]["spec"]["containers"]
        wanted_files.append(
            f"/var/log/containers/{router['metadata']['name']}-6c7d8f9b-abcde_"
            f"{router['metadata']['namespace']}_{box['name']}-{'c' * 64}.log"
        )
    for wanted in wanted_files:
        assert any(fnmatch.fnmatch(wanted, p) for p in patterns), wanted
    assert not any(fnmatch.fnmatch(other_file, p) for p in patterns)

    out = io.StringIO()
    EmfEmitter(
        CollectorRegistry(), cluster=any_synth.env.cluster.name, interval_s=60, stream=out
    ).emit()
    line = out.getvalue().strip()
    field, _, pattern = by_name[("FILTER", "grep")]["Regex"].partition(" ")
    assert field == "log" and re.search(pattern, line)
    assert not re.search(pattern, "INFO picker started on :9002")

    merge = by_name[("FILTER", "kubernetes")]
    assert merge["Merge_Log"] == "On" and "Merge_Log_Key" not in merge
    assert merge["Kube_Tag_Prefix"] == tail["Tag"].rstrip("*") + "var.log.containers."
    output = by_name[("OUTPUT", "cloudwatch_logs")]
    assert output["log_format"] == "json/emf"
    assert output["log_group_name"].startswith("/aws/containerinsights/${CLUSTER_NAME}/")
