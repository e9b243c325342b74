"""The application layer: workflows that drive the probe loop, the graph and the models
(FACTOR runs, evaluation against human judgements, the demo). Nothing below imports it."""
