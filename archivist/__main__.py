from archivist.cli import main

main()
