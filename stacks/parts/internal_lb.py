"""The internal Network Load Balancer in front of Envoy Gateway.

Private only: the scheme is internal, it sits in private subnets, and its security group
admits TLS on 443 from the environment's allowed CIDRs and nothing else. Tokens and
prompts are never in clear text on the wire, with or without an ACM certificate:

* with one for the region (`ingress.certificate_arns`, a prerequisite: an ACM certificate
  is only issued for a name whose DNS validation record resolves publicly, or imported),
  the NLB terminates TLS on it and re-encrypts to Envoy's HTTPS listener;
* without one, the NLB passes TCP through to Envoy's HTTPS listener, and clients see the
  certificate cert-manager issues in the cluster (cdk8s/charts/certificates.py) and trust
  its CA (docs/first-deploy.md). No certificate is requested here: a DNS-validated
  request for a private name that no public zone answers stays `PENDING_VALIDATION`
  until it fails after 72 hours (ACM user guide, "DNS validation"), and the stack waits
  on it.

Envoy's pods join the IP target group (named `igw-<env>-envoy`) through a
TargetGroupBinding (cdk8s side) that names it by ARN: the gitops stack annotates Argo
CD's cluster Secret with it (stacks/parts/argocd.py). The ARN and the load balancer's
DNS name are also published as SSM parameters under `/igw/<env>/<region>/ingress/`,
which the global router reads to find its peers. Clients use the environment's name
(`ingress.domain_name`, resolved to the nearest healthy region); the global router
addresses each cluster by its regional name `<region>.<domain_name>`, so the
certificate covers both.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_certificatemanager as acm
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_elasticloadbalancingv2 as elbv2
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from envspec.names import regional_domain_name, target_group_name

from .private_nlb import PrivateNlbProps, private_tls_nlb, tls_listener

__all__ = [
    "HEALTHY_HTTP_CODES",
    "HEALTH_CHECK_PATH",
    "InternalLoadBalancer",
    "InternalLoadBalancerProps",
    "ingress_parameter_prefix",
    "regional_domain_name",
    "target_group_name",
]


#: What the NLB asks Envoy's TLS listener for (ELB docs, "Health checks for Network Load
#: Balancer target groups": HTTPS checks complete a TLS handshake, certificate unchecked).
HEALTH_CHECK_PATH = "/"
HEALTHY_HTTP_CODES = "200-499"


def ingress_parameter_prefix(environment: str, region: str) -> str:
    return f"/igw/{environment}/{region}/ingress"


@dataclass(frozen=True)
class InternalLoadBalancerProps:
    environment: str
    region: str
    domain_name: str
    #: None: TCP passes through to Envoy, which presents the cluster-issued certificate.
    certificate_arn: str | None
    allowed_cidrs: tuple[str, ...]
    target_port: int
    cluster_security_group_id: str
    access_logs: s3.IBucket


class InternalLoadBalancer(Construct):
    """Internal NLB, TLS 443 -> Envoy (IP targets), access logs, SSM outputs."""

    def __init__(
        self, scope: Construct, construct_id: str, vpc: ec2.IVpc, props: InternalLoadBalancerProps
    ) -> None:
        super().__init__(scope, construct_id)
        nlb = private_tls_nlb(
            self,
            vpc,
            PrivateNlbProps(
                description="Internal inference endpoint: TLS from allowed CIDRs only",
                allowed_cidrs=props.allowed_cidrs,
                target_port=props.target_port,
                to_targets="to Envoy Gateway pods",
                cluster_security_group_id=props.cluster_security_group_id,
                ingress_id="ToEnvoy",
                ingress_description="internal NLB to Envoy Gateway",
                access_logs=props.access_logs,
                log_prefix="nlb",
            ),
        )
        self.security_group, self.load_balancer = nlb.security_group, nlb.load_balancer
        self.certificate: acm.ICertificate | None = (
            acm.Certificate.from_certificate_arn(self, "Certificate", props.certificate_arn)
            if props.certificate_arn
            else None
        )
        self.target_group = elbv2.NetworkTargetGroup(
            self,
            "Envoy",
            vpc=vpc,
            # A fixed name, readable in the console and in `make preflight`; the cdk8s
            # TargetGroupBinding binds it by ARN (the cluster Secret's annotation).
            target_group_name=target_group_name(props.environment),
            port=props.target_port,
            # TLS to Envoy behind a TLS listener; TCP (the same TLS bytes, passed
            # through) behind a TCP listener, which takes only TCP target groups.
            protocol=elbv2.Protocol.TLS if self.certificate else elbv2.Protocol.TCP,
            target_type=elbv2.TargetType.IP,
            # Streams drain: Envoy finishes in-flight responses before a pod leaves.
            deregistration_delay=Duration.seconds(120),
            # HTTPS, not TCP: a TCP check only opens the connection and stays green while
            # every handshake fails (a listener Envoy has no filter chain for, a missing
            # certificate). This one completes the TLS handshake and needs an HTTP answer
            # from Envoy's listener; with no route for `/` Envoy answers 404 (401 once the
            # SecurityPolicy asks for a key), so any 2xx-4xx is "Envoy serves TLS", and a
            # 5xx from Envoy itself (overload) takes the pod out too.
            health_check=elbv2.HealthCheck(
                protocol=elbv2.Protocol.HTTPS,
                path=HEALTH_CHECK_PATH,
                healthy_http_codes=HEALTHY_HTTP_CODES,
                interval=Duration.seconds(10),
                timeout=Duration.seconds(6),
                healthy_threshold_count=2,
                unhealthy_threshold_count=2,
            ),
        )
        if self.certificate is not None:
            self.listener = tls_listener(self.load_balancer, self.certificate, self.target_group)
        else:
            self.listener = self.load_balancer.add_listener(
                "Tcp",
                port=443,
                protocol=elbv2.Protocol.TCP,
                default_target_groups=[self.target_group],
            )
        prefix = ingress_parameter_prefix(props.environment, props.region)
        ssm.StringParameter(
            self,
            "TargetGroupArnParameter",
            parameter_name=f"{prefix}/target-group-arn",
            string_value=self.target_group.target_group_arn,
            description="Envoy's TargetGroupBinding targets this group",
        )
        ssm.StringParameter(
            self,
            "EndpointParameter",
            parameter_name=f"{prefix}/endpoint",
            string_value=f"https://{regional_domain_name(props.domain_name, props.region)}",
            description="This region's own endpoint, which the global router probes and routes to",
        )
        ssm.StringParameter(
            self,
            "LoadBalancerDnsParameter",
            parameter_name=f"{prefix}/load-balancer-dns",
            string_value=self.load_balancer.load_balancer_dns_name,
            description="Point the private DNS record of the endpoint here",
        )
