from tracekit.cli import run

run()
