from tests.unit.conftest import deployment  # noqa: F401 - fixture
