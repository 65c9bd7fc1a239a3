"""The README's configuration reference names every setting, as flag and as variable."""

from pathlib import Path

import pytest

from proxy.settings import Settings

README = (Path(__file__).parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_is_documented(name):
    assert f"`--{name.replace('_', '-')}`" in README
    assert f"`LOOPWARDEN_{name.upper()}`" in README
