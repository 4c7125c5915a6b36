"""Planning a record run, without Beam: the plain data a plan is made of and its pure rules.

The launcher (`pipelines.plan`, `pipelines.config`) builds a plan from these, and the Beam stages
(`transforms.stages`) receive them on the workers; importing this package imports no Apache Beam
(and no TensorFlow), so validating options and planning stay light.

- `types`: `InputFile`, `ReadWindowsConfig`, `Sharding`, `Segment`, `ReadTask`, `ShardSpec`;
- `layout`: `RecordLayout`, the keys and feature shapes of a run's elements;
- `sharding`: splits, shards, read tasks, the shard count and the analysed splits;
- `compression`: the shards' compression (``--compression AUTO`` measures a sample).
"""
