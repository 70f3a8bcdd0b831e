import jobkit.compat.composer  # noqa: F401


def test_imports():
    pass
