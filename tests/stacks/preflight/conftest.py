"""moto for the preflight tests (`aws`); helpers beside this file (`moto_env`) import by
name.

AWS APIs cannot be reached from here (tests talk to loopback only): `moto` (`mock_aws`)
answers EC2, Service Quotas, ACM and Secrets Manager in process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto import mock_aws

sys.path.insert(0, str(Path(__file__).parent))  # moto_env, beside this file


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    """One moto mock for the module (its EC2 regions are slow to build), fake credentials."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            patch.setenv(name, "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # AMIs are not needed here
        patch.delenv("AWS_PROFILE", raising=False)
        with mock_aws():
            yield
