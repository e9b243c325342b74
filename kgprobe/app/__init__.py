"""Workflows that tie the graph, the models and the measures together (what the CLI runs);
measures never import from here."""
