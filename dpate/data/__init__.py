"""The data sets dpate is demonstrated and tested on, which are not schemas of a study: the
paper's (IST, STAR, IHDP, Lalonde) and Synth.

- :mod:`dpate.data.sources`: where each data set's files come from and their checksums.
- :mod:`dpate.data.fetch`: ``dpate data fetch``: the files downloaded (or copied from a local
  mirror) into the data directory, each checked against its checksum.
- :mod:`dpate.data.datasets`: the data sets loaded from the data directory (``DPATE_DATA_DIR``).
- :mod:`dpate.data.extracts`: ``dpate data extracts``: each example site's records written as the
  site would hold them (the deployment guide's STAR sites).

Import the submodules directly; this package imports nothing by itself.
"""
