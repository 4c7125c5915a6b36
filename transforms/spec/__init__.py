"""The planned job as the Beam stages receive it: plain data and the rules the workers apply.

Planning (`pipelines.plan`) fills these in before any work; the stages (`transforms.stages`)
receive them on the workers. Importing this package imports no Apache Beam (and no TensorFlow),
so validating options and planning stay light.

- `types`: `InputFile`, `FileAnnotation`, `ReadWindowsConfig`, `Sharding`, `Segment`,
  `ReadTask`, `ShardSpec`;
- `layout`: `RecordLayout`, the keys and feature shapes of a run's elements;
- `sharding`: the shard a window goes to within its split (`shard_of`, ``--shard_by``);
- `annotation_columns`: an annotated run's label columns of the rows a stage cut;
- `compression`: the shards' compression (``--compression AUTO`` measures a sample).
"""
