"""Code blocks of the README, for the tests that run them."""

import re

from tests.conftest import ROOT


def blocks(lang: str) -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)
