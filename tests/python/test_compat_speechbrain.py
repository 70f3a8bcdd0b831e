import jobkit.compat.speechbrain  # noqa: F401


def test_imports():
    pass
