"""CloudWatch alarms and dashboards for one cluster and for the fleet.

Cluster level (every region): average KV-cache use, error rate (5xx / requests), P99
time to first token, 429 rate (429 / requests), ready pods. Fleet level (primary region):
routing decisions, failover events, rate-limit hits of the global router. Rates are
metric-math expressions, so an idle cluster (no requests) never divides by zero into an
alarm.

The data comes from the picker (`igw picker --emf-interval --emf-cluster`, rendered by
cdk8s/charts/picker.py): every replica writes one EMF record per interval to stdout, and
the CloudWatch agent's log pipeline turns it into metrics. What missing data means is
decided per alarm (`MISSING_DATA`), next to the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subs
from constructs import Construct

from envspec.infra import AlarmSpec

from .metrics import (
    CLUSTER_DIMENSION,
    CLUSTER_METRICS,
    CLUSTER_NAMESPACE,
    FLEET_DIMENSION,
    FLEET_METRICS,
    FLEET_NAMESPACE,
)

__all__ = [
    "MISSING_DATA",
    "ClusterAlarms",
    "ClusterAlarmsProps",
    "FleetAlarms",
    "FleetAlarmsProps",
]

_PERIOD = Duration.minutes(1)

#: How each alarm reads a minute without a record. A record is missing when no picker
#: runs (a cluster whose workloads are not synced yet, or an environment torn down) or
#: when the minute had no requests (the rates and TTFT have no sample then).
MISSING_DATA: dict[str, cw.TreatMissingData] = {
    # KV-cache use is reported while pods are ready; no record means no pods to be full.
    "KvCacheHigh": cw.TreatMissingData.NOT_BREACHING,
    # No requests in the minute: no errors, no 429s, no first tokens to be slow.
    "ErrorRateHigh": cw.TreatMissingData.NOT_BREACHING,
    "TtftP99High": cw.TreatMissingData.NOT_BREACHING,
    "RateLimitedHigh": cw.TreatMissingData.NOT_BREACHING,
    # A running picker reports ReadyPods on every record, 0 included, so a model outage
    # is a datapoint below the threshold and pages. No record at all means no picker:
    # on a cluster whose workloads are not deployed yet that is not an outage, so it
    # must not page (BREACHING would, from the first minute). MISSING keeps the state
    # and shows INSUFFICIENT_DATA once every period of the window is empty, which the
    # dashboard's alarm widget shows; the picker Deployment's own health is Argo CD's.
    "ReadyPodsLow": cw.TreatMissingData.MISSING,
}


def _metric(namespace: str, name: str, dims: dict[str, str], statistic: str) -> cw.Metric:
    return cw.Metric(
        namespace=namespace,
        metric_name=name,
        dimensions_map=dims,
        statistic=statistic,
        period=_PERIOD,
    )


class AlarmTopic(Construct):
    """An SNS topic encrypted with a key CloudWatch may use, TLS-only publishing."""

    def __init__(self, scope: Construct, construct_id: str, email: str | None) -> None:
        super().__init__(scope, construct_id)
        key = kms.Key(self, "Key", enable_key_rotation=True, description="Alarm topic")
        key.add_to_resource_policy(
            iam.PolicyStatement(
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                resources=["*"],  # in a key policy, "*" means this key
            )
        )
        self.topic = sns.Topic(self, "Topic", master_key=key, enforce_ssl=True)
        if email:
            self.topic.add_subscription(subs.EmailSubscription(email))


@dataclass(frozen=True)
class ClusterAlarmsProps:
    cluster_name: str
    thresholds: AlarmSpec


class ClusterAlarms(Construct):
    """The five cluster-level alarms and the cluster dashboard."""

    def __init__(self, scope: Construct, construct_id: str, props: ClusterAlarmsProps) -> None:
        super().__init__(scope, construct_id)
        t = props.thresholds
        dims = {CLUSTER_DIMENSION: props.cluster_name}
        m = {
            key: _metric(
                CLUSTER_NAMESPACE,
                name,
                dims,
                {"kv_cache": "Average", "ttft": "p99", "ready_pods": "Minimum"}.get(key, "Sum"),
            )
            for key, name in CLUSTER_METRICS.items()
        }
        error_rate = cw.MathExpression(
            expression="IF(requests > 0, errors / requests, 0)",
            using_metrics={"errors": m["errors"], "requests": m["requests"]},
            label="error rate",
            period=_PERIOD,
        )
        limited_rate = cw.MathExpression(
            expression="IF(requests > 0, limited / requests, 0)",
            using_metrics={"limited": m["rate_limited"], "requests": m["requests"]},
            label="429 rate",
            period=_PERIOD,
        )
        self.topic = AlarmTopic(self, "Notify", t.email).topic
        above = cw.ComparisonOperator.GREATER_THAN_THRESHOLD
        spec: list[tuple[str, cw.Metric | cw.MathExpression, float, cw.ComparisonOperator, str]] = [
            ("KvCacheHigh", m["kv_cache"], t.kv_cache_utilization_max, above, "KV-cache use"),
            ("ErrorRateHigh", error_rate, t.error_rate_max, above, "5xx share"),
            ("TtftP99High", m["ttft"], t.ttft_p99_max_s, above, "P99 TTFT in seconds"),
            ("RateLimitedHigh", limited_rate, t.rate_limited_max, above, "429 share"),
        ]
        self.alarms: dict[str, cw.Alarm] = {}
        for alarm_id, metric, threshold, operator, what in spec:
            self.alarms[alarm_id] = metric.create_alarm(
                self,
                alarm_id,
                alarm_name=f"{props.cluster_name}-{alarm_id}",
                alarm_description=f"{what} of {props.cluster_name} above {threshold}",
                threshold=threshold,
                comparison_operator=operator,
                evaluation_periods=5,
                datapoints_to_alarm=3,
                treat_missing_data=MISSING_DATA[alarm_id],
            )
        self.alarms["ReadyPodsLow"] = m["ready_pods"].create_alarm(
            self,
            "ReadyPodsLow",
            alarm_name=f"{props.cluster_name}-ReadyPodsLow",
            alarm_description=f"ready model-server pods of {props.cluster_name} below "
            f"{t.ready_pods_min}",
            threshold=t.ready_pods_min,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            treat_missing_data=MISSING_DATA["ReadyPodsLow"],
        )
        action = cw_actions.SnsAction(self.topic)
        for alarm in self.alarms.values():
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"{props.cluster_name}-gateway",
            widgets=[
                [
                    cw.GraphWidget(title="KV-cache use (avg)", left=[m["kv_cache"]], width=8),
                    cw.GraphWidget(title="Error rate", left=[error_rate], width=8),
                    cw.GraphWidget(title="TTFT P99 (s)", left=[m["ttft"]], width=8),
                ],
                [
                    cw.GraphWidget(title="429 rate", left=[limited_rate], width=8),
                    cw.GraphWidget(title="Ready pods", left=[m["ready_pods"]], width=8),
                    cw.AlarmStatusWidget(
                        title="Alarms", alarms=list(self.alarms.values()), width=8
                    ),
                ],
            ],
        )


@dataclass(frozen=True)
class FleetAlarmsProps:
    environment: str
    thresholds: AlarmSpec


class FleetAlarms(Construct):
    """The global router's view: routing decisions, failovers, rate-limit hits."""

    def __init__(self, scope: Construct, construct_id: str, props: FleetAlarmsProps) -> None:
        super().__init__(scope, construct_id)
        dims = {FLEET_DIMENSION: props.environment}
        m = {
            key: _metric(FLEET_NAMESPACE, name, dims, "Sum") for key, name in FLEET_METRICS.items()
        }
        self.topic = AlarmTopic(self, "Notify", props.thresholds.email).topic
        self.failover_alarm = m["failovers"].create_alarm(
            self,
            "FailoverEvents",
            alarm_name=f"igw-{props.environment}-FailoverEvents",
            alarm_description="the global router failed a cluster over",
            threshold=props.thresholds.failover_events_max,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )
        self.failover_alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        self.dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"igw-{props.environment}-fleet",
            widgets=[
                [
                    cw.GraphWidget(
                        title="Routing decisions", left=[m["routing_decisions"]], width=8
                    ),
                    cw.GraphWidget(title="Failover events", left=[m["failovers"]], width=8),
                    cw.GraphWidget(title="Rate-limit hits", left=[m["rate_limit_hits"]], width=8),
                ]
            ],
        )
