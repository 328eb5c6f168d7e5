#!/usr/bin/env python3
"""CDK entry point: builds the stacks of one environment.

    cdk synth -c environment=prod        # or: IGW_ENVIRONMENT=prod python app.py
    make synth                           # every environment into cdk.out/<env>/

The environment comes from CDK context `environment`, else $IGW_ENVIRONMENT, else `dev`,
and is read from gitops/environments/<env>/environment.yaml. Synth needs neither AWS
credentials nor network: nothing is looked up, zones come from the environment file.
"""

from __future__ import annotations

import os
import sys

# jsii starts node on import of aws_cdk; node 20 is past end of life for jsii, which
# prints a banner on every run unless told it is known.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")

from envspec.environment import load_environment
from inference_gateway.errors import ConfigError
from stacks.application import build, environment_name, nag_findings, new_app


def main() -> int:
    app = new_app()
    name = environment_name(app)
    try:
        env = load_environment(name)
        build(app, env, source=f"gitops/environments/{name}/environment.yaml")
    except ConfigError as error:
        print(f"cdk synth: {error}", file=sys.stderr)
        return 2
    try:
        app.synth()
    except RuntimeError as error:  # jsii re-raises CDK's ValidationError as RuntimeError
        if "ValidationFailed" not in str(error):
            raise
        print(f"cdk synth: {name}: {error}", file=sys.stderr)
        print(nag_findings(app.outdir), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
