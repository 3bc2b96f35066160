import subprocess
import sys
import zipfile

from conftest import ROOT


def test_the_wheel_ships_all_three_packages_and_the_console_script(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("archivist-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for module in ("agent/cli.py", "tools/store.py", "tools/retrieval.py", "ingest/graph.py"):
        assert module in names
    assert not any(n.startswith(("tests/", "examples/")) for n in names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "archivist = agent.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
