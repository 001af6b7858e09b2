"""The sidebar's TypeScript: `npm test` in labextension/ type-checks every module (tsc --noEmit,
strict) and runs the unit tests of the pure modules (format, timeline bars, job order) under Node."""

from __future__ import annotations

import shutil
import subprocess

from tests.conftest import ROOT, require


def test_typescript_typechecks_and_unit_tests_pass() -> None:
    require(shutil.which("npm") is not None, "npm is not installed")
    require((ROOT / "node_modules" / "typescript").is_dir(),
            "node_modules missing (scripts/setup.sh runs npm ci)")
    r = subprocess.run(["npm", "test", "--workspace", "labextension"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "# fail 0" in out and "# pass " in out, out[-2000:]
