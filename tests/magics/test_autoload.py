"""Installing Schedulearn makes every IPython kernel of the environment load the magics: the
package installs `{sys.prefix}/etc/ipython/ipython_kernel_config.py` (hatch shared-data)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import require

CONFIG = Path(sys.prefix) / "etc" / "ipython" / "ipython_kernel_config.py"


def test_a_fresh_kernel_has_the_magics_without_load_ext(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(CONFIG.exists(), f"{CONFIG} not installed (pip install -e . installs it)")
    assert "schedulearn_magics" in CONFIG.read_text()
    from jupyter_client.manager import start_new_kernel

    # A clean profile: nothing of the developer's own IPython configuration takes part.
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        outputs: list[str] = []

        def hook(msg: dict) -> None:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                outputs.append(content["text"])
            elif msg["msg_type"] == "error":
                outputs.append(f"ERROR {content['ename']}: {content['evalue']}")

        reply = kc.execute_interactive(
            "mm = get_ipython().magics_manager.magics\n"
            "print('cell:', 'schedulearn' in mm['cell'], 'line:', 'schedulearn' in mm['line'])",
            output_hook=hook, timeout=60,
        )
        assert reply["content"]["status"] == "ok", outputs
        assert "cell: True line: True" in "".join(outputs), outputs
        # The options are there too (no server needed for --help).
        outputs.clear()
        kc.execute_interactive("%%schedulearn --help\npass", output_hook=hook, timeout=60)
        said = "".join(outputs)
        assert "--launcher" in said and said.startswith("usage: %%schedulearn [-h]"), outputs
        assert "%%%" not in said and "::" not in said and "<K=V>" not in said, said  # not IPython's reST
        assert "\ncell's value.\n\n    %%schedulearn --gpus 2" in said, said  # the description, dedented
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
