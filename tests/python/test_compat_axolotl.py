import jobkit.compat.axolotl  # noqa: F401


def test_imports():
    pass
