"""The `resources` fixture: each test that takes it runs once per rendered overlay."""

import pytest

from tests.deploy.kustomize import Resource
from tests.deploy.manifests import OVERLAYS, rendered


@pytest.fixture(params=OVERLAYS)
def resources(request: pytest.FixtureRequest) -> list[Resource]:
    return rendered(request.param).resources
