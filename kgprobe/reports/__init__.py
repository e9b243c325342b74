"""Reports, results files and the model ladder, over ``kgprobe.stats`` (issue 20).

One package, one way down: ``data`` (the report's types) ← ``text`` (formatters, Markdown,
LaTeX) ← ``build`` (groups and statistics from the graph's rows) ← ``console``, ``figures`` ←
``html`` ← ``results`` (results.json, harness.json, samples) ← ``write`` (the report's files,
``report()``) and ``ladder`` (three or more models). Nothing here is imported by the loop, the
measures or the graph layer (tests/project/test_import_graph.py).
"""
