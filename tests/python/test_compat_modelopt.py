import jobkit.compat.modelopt  # noqa: F401


def test_imports():
    pass
