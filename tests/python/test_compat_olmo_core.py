import jobkit.compat.olmo_core  # noqa: F401


def test_imports():
    pass
