"""Node features on disk (``data.features=disk``): a PyG ``FeatureStore`` over raw row-major files, read
row by row without memory-mapping, and a copy of the rows in the order of a partition.

- [`matrix`][pipegnn.data.features.matrix]: a feature matrix as a model sees it when it is not in memory
  ([`FeatureMeta`][pipegnn.data.features.matrix.FeatureMeta],
  [`FeatureRows`][pipegnn.data.features.matrix.FeatureRows]);
- [`files`][pipegnn.data.features.files]: the file format (raw rows, a JSON sidecar, an optional row order);
- [`store`][pipegnn.data.features.store]: [`DiskFeatureStore`][pipegnn.data.features.store.DiskFeatureStore],
  which reads rows in runs with ``preadv``;
- [`cache`][pipegnn.data.features.cache]: the files built once per dataset and per partition.
"""
from pipegnn.data.features.cache import cached_store, partition_ordered
from pipegnn.data.features.files import ATTR, GROUP, FeatureFileError
from pipegnn.data.features.matrix import STORAGE, FeatureMeta, FeatureRows
from pipegnn.data.features.store import DiskFeatureStore, files_opened

__all__: list[str] = []  # internal: see the package's public names (pipegnn, pipegnn.results)
