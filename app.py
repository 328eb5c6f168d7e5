#!/usr/bin/env python3
"""CDK entry point: builds the stacks of one environment into cdk.out/<env>/.

    make synth                                          # every environment
    IGW_ENVIRONMENT=prod .venv/bin/python app.py        # one
    npx cdk synth -c environment=prod -o cdk.out/prod   # the same through the CDK CLI

The environment comes from CDK context `environment`, else $IGW_ENVIRONMENT, else `dev`,
and is read from gitops/environments/<env>/environment.yaml. Its assembly goes to
cdk.out/<env>/ whichever way it is built (cdk.json's output is dev's, so the CLI takes
`-o cdk.out/<env>` for another; a context key the app does not read, such as `-c env=`,
is refused rather than ignored). Synth needs neither AWS credentials nor network:
nothing is looked up, zones come from the environment file.

Exit status: 0, 2 for bad input (the environment file, the context, the output folder;
the same field-path lines as `igw validate`), 1 when cdk-nag or CDK validation fails.
"""

from __future__ import annotations

import os
import sys

# jsii starts node on import of aws_cdk; node 20 is past end of life for jsii, which
# prints a banner on every run unless told it is known.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
# aws-cdk-lib warns on stderr, with a stray `program.js:…` line, when a construct it builds
# for us uses a deprecated API (aws_eks_v2 makes its OIDC provider with one); nothing in
# this repository calls a deprecated API, so the warning names nothing to change here.
os.environ.setdefault("JSII_DEPRECATED", "quiet")

from envspec.environment import load_environment
from inference_gateway.cli.messages import config_error_lines
from inference_gateway.errors import ConfigError
from stacks.app_context import OUTPUT_DIR, context_problems
from stacks.application import build, environment_name, nag_findings, new_app


def main() -> int:
    app = new_app()
    name = environment_name(app)
    if "CDK_OUTDIR" not in os.environ:  # run as a script: cdk.out/<env>/, as the CLI's
        app = new_app(outdir=str(OUTPUT_DIR / name))
    try:
        problems = context_problems(app.node.get_all_context(), app.outdir, name)
        if problems:
            raise ConfigError("the command line", problems)
        env = load_environment(name)
        build(app, env, source=f"gitops/environments/{name}/environment.yaml")
    except ConfigError as error:
        print("\n".join(config_error_lines("cdk synth", error)), file=sys.stderr)
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
