"""Where the paper's four public data sets come from: each file's name, pinned sha256 and
download URLs (:data:`SOURCES`), with each data set's citation and licence (docs/how-to/data.md).
``dpate data fetch`` (:mod:`dpate.data.fetch`) refuses any other bytes; the loaders are in
:mod:`dpate.data.datasets`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SOURCES", "DatasetSource", "SourceFile"]


@dataclass(frozen=True)
class SourceFile:
    """One file of a public data set: its name, pinned sha256, and where it can be downloaded
    (tried in order; the checksum, not the URL, decides what is accepted)."""

    name: str
    sha256: str
    urls: tuple[str, ...]


@dataclass(frozen=True)
class DatasetSource:
    """A public data set: its folder name, citation, licence and files (docs/how-to/data.md)."""

    name: str
    citation: str
    licence: str
    files: tuple[SourceFile, ...]


_RDATASETS = (
    "https://raw.githubusercontent.com/vincentarelbundock/Rdatasets/"
    "1dcc2bf5f955cc1224a3e1307256e1fe86b68dae/csv"
)
_CEVAE = (
    "https://raw.githubusercontent.com/AMLab-Amsterdam/CEVAE/"
    "9081f863e24ce21bd34c8d6a41bf0edc7d1b65dd/datasets/IHDP"
)
_IHDP_SHA256 = (
    "2bdc8b94fdf2f669b1d3d49325fd9359d88418566545003867841312a1653411",
    "36db2f3d002250bc95e5214477718c939fbe7dfe8df573c4050d8b246d314042",
    "bd792ce0642468195b2c3f0cd4c521378d7d52d044f153e844d151a87e067518",
    "ac04602a2f052af1211347bcaff87f7bab356a4a7f42f8c6a81edede51549006",
    "8f9b3ef4b66e8f9dd240c9851233f4fb483c73c25b6d23c6459c666edb9cd691",
    "e05192794201c8a8fe1e4a88f12d3367d3d6b568eadb46365557661bff00712e",
    "246684bfc9e1258e5bdc59c3d1c13c0694a331d1f13026ff79f6c4605e6d3678",
    "6e88b890ee4ed6274b8ea4285500dd0865ab71e17010ee505f7e2a2d507c4511",
    "fe959d86a37be9278ef195fbf139b2b8af1b8246b3518208cd00b295d906a98f",
    "b9bce7e081f245b7689a3c2b5e4ed37162dca8cd596e0998b73ddc0ac92a4919",
)

#: The four public data sets: where each file comes from and its pinned sha256 (``dpate data
#: fetch`` refuses any other bytes). Commits are pinned so that the bytes cannot drift.
SOURCES: dict[str, DatasetSource] = {
    "ist": DatasetSource(
        "ist",
        "Sandercock P, Niewada M, Czlonkowska A (2011). International Stroke Trial database "
        "(version 2). University of Edinburgh. doi:10.7488/ds/104",
        "ODC-By 1.0 (Contains information from the International Stroke Trial database "
        "(version 2), doi:10.7488/ds/104, made available under the ODC Attribution License.)",
        (
            SourceFile(
                "IST_corrected.csv",
                "14ba957322d5ccbe4cd240692f1c8c70246c718076d3346a229015c440b03b54",
                (
                    "https://datashare.ed.ac.uk/bitstream/handle/10283/128/IST_corrected.csv",
                    "https://raw.githubusercontent.com/tomdelany04/PATH-Master/"
                    "8ba1d040ca6c207f5b5f07b21efa1fd22aa92d8e/IST_corrected.csv",
                ),
            ),
        ),
    ),
    "star": DatasetSource(
        "star",
        "Project STAR (Achilles et al., doi:10.7910/DVN/SIWH9F), as data set STAR of the R "
        "package AER (Kleiber and Zeileis), via Rdatasets",
        "GPL-3 (Rdatasets); AER is GPL-2 | GPL-3",
        (
            SourceFile(
                "STAR.csv",
                "0e8b179ea3d883730b25008ca1293c4c8f886aa8d5d299c03ab6ff05d0123ae6",
                (f"{_RDATASETS}/AER/STAR.csv",),
            ),
        ),
    ),
    "ihdp": DatasetSource(
        "ihdp",
        "Hill J (2011), JCGS 20(1); NPCI setting A outcomes as distributed with CEVAE "
        "(Louizos et al. 2017), commit 9081f86",
        "none stated",
        (
            SourceFile(
                "columns.txt",
                "66a866998fd9103d015a3f03c654b70c63de46572a8802e33df7325d942674e6",
                (f"{_CEVAE}/columns.txt",),
            ),
            *(
                SourceFile(f"ihdp_npci_{i}.csv", sha, (f"{_CEVAE}/csv/ihdp_npci_{i}.csv",))
                for i, sha in enumerate(_IHDP_SHA256, start=1)
            ),
        ),
    ),
    "lalonde": DatasetSource(
        "lalonde",
        "LaLonde (1986), AER 76; Dehejia and Wahba (1999); data set nswdemo of the R package DAAG, "
        "via Rdatasets",
        "GPL-3 (Rdatasets); DAAG is GPL",
        (
            SourceFile(
                "nswdemo.csv",
                "3343cb4d20bd1dfd6b4940ca5610cdb2c177166658b2a070e135ec5c5c151020",
                (f"{_RDATASETS}/DAAG/nswdemo.csv",),
            ),
        ),
    ),
}
