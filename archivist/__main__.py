from archivist.cli import run

run()
