"""Battery originals end to end on generated files: NASA MATLAB v5 (scipy.io.savemat) and Severson
MATLAB 7.3/HDF5 batch files (h5py, groups and object references as in the published files),
served by a local HTTP server on 127.0.0.1 with Range support; and the download cache itself
(resume, truncation, checksums). Nothing here talks to the outside network."""

from __future__ import annotations

import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import polars as pl
import pytest

import datasets
from datasets import battery_sources as bs
from datasets import cache, options
from datasets.errors import DataFormatError, DownloadError


# ----------------------------------------------------------------------------- local server
class _Files(BaseHTTPRequestHandler):
    """Serves server.root; honours ``Range: bytes=N-`` when server.ranges; server.cut[name] = k
    sends only k bytes of the next answer for that name, then drops the connection."""

    def do_GET(self):  # noqa: N802 (http.server's naming)
        name = unquote(self.path.lstrip("/"))
        self.server.requests.append((name, self.headers.get("Range")))
        path = self.server.root / name
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        wanted = self.headers.get("Range")
        if wanted and self.server.ranges:
            start = int(re.match(r"bytes=(\d+)-", wanted).group(1))
            if start >= len(data):
                self.send_error(416)
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        body = data[start:]
        cut = self.server.cut.pop(name, None)
        self.wfile.write(body if cut is None else body[:cut])
        self.wfile.flush()
        if cut is not None:
            self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    srv.root, srv.requests, srv.cut, srv.ranges = root, [], {}, True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("NDVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("NDVM_OFFLINE", raising=False)


# ----------------------------------------------------------------------------- the cache
def test_download_is_checksummed_and_verified_on_reuse(server, tmp_path):
    payload = np.random.default_rng(0).bytes(300_000)
    (server.root / "f.bin").write_bytes(payload)
    got = cache.fetch(f"{server.url}/f.bin", "f.bin", progress=False)
    assert got.read_bytes() == payload
    import hashlib

    digest = hashlib.sha256(payload).hexdigest()
    assert cache.checksum_path(got).read_text() == f"{digest}  f.bin\n"
    # reuse: no request, the checksum is checked
    n = len(server.requests)
    assert cache.fetch(f"{server.url}/f.bin", "f.bin", progress=False) == got and len(server.requests) == n
    # damaged after download: detected and fetched again
    got.write_bytes(payload[:-1] + b"\x00")
    assert cache.fetch(f"{server.url}/f.bin", "f.bin", progress=False).read_bytes() == payload
    assert len(server.requests) == n + 1
    # a published digest that the file does not have: a typed error, nothing cached
    with pytest.raises(DownloadError, match="SHA-256"):
        cache.fetch(f"{server.url}/f.bin", "g.bin", sha256="0" * 64, progress=False)
    assert not (tmp_path / "cache" / "g.bin").exists()


def test_truncated_download_is_a_typed_error_and_resumes(server, tmp_path):
    payload = np.random.default_rng(1).bytes(2_500_000)
    (server.root / "big.mat").write_bytes(payload)
    server.cut["big.mat"] = 1_000_000
    target = tmp_path / "cache" / "big.mat"
    with pytest.raises(DownloadError, match=r"truncated: 1,000,000 of 2,500,000 bytes"):
        cache.fetch(f"{server.url}/big.mat", "big.mat", progress=False)
    assert not target.exists(), "a truncated body is never the cached file"
    assert cache.partial_path(target).stat().st_size == 1_000_000
    seen = []
    got = cache.fetch(f"{server.url}/big.mat", "big.mat", progress=lambda done, total: seen.append((done, total)))
    assert got.read_bytes() == payload
    assert server.requests[-1] == ("big.mat", "bytes=1000000-"), "the second fetch asks only for the rest"
    assert seen[0] == (1_000_000, 2_500_000) and seen[-1] == (2_500_000, 2_500_000)
    assert not cache.partial_path(target).exists()


def test_resume_against_a_server_without_ranges_starts_over(server, tmp_path):
    payload = b"0123456789" * 50_000
    (server.root / "x.bin").write_bytes(payload)
    server.ranges = False
    server.cut["x.bin"] = 1234
    with pytest.raises(DownloadError, match="truncated"):
        cache.fetch(f"{server.url}/x.bin", "x.bin", progress=False)
    assert cache.fetch(f"{server.url}/x.bin", "x.bin", progress=False).read_bytes() == payload


def test_wrong_published_size_is_an_error(server):
    (server.root / "s.bin").write_bytes(b"abc" * 1000)
    with pytest.raises(DownloadError, match="3,000 bytes, the published file has 3,001"):
        cache.fetch(f"{server.url}/s.bin", "s.bin", size=3001, progress=False)


# ----------------------------------------------------------------------------- NASA (MATLAB v5)
def nasa_cell_file(path: Path, cell: str, capacities: list[float], ambient: float = 24.0) -> None:
    """A B00xx.mat with NASA's structure: cell.cycle(k).{type, ambient_temperature, time, data}, a
    charge and an impedance operation around every discharge; discharge data carries Capacity."""
    from scipy.io import savemat

    kinds = []
    for cap in capacities:
        kinds += [("charge", None), ("discharge", cap), ("impedance", None)]
    ops = np.zeros((1, len(kinds)), dtype=[("type", "O"), ("ambient_temperature", "O"), ("time", "O"), ("data", "O")])
    for k, (kind, cap) in enumerate(kinds):
        ops[0, k]["type"] = kind
        ops[0, k]["ambient_temperature"] = float(ambient)
        ops[0, k]["time"] = np.array([[2008.0, 4.0, 2.0, 13.0, 8.0 + k % 50, 17.921 + k]])
        if kind == "discharge":
            v = np.linspace(4.19, 2.6 + 0.01 * k % 7, 30)
            ops[0, k]["data"] = {
                "Voltage_measured": v,
                "Current_measured": np.full(30, -2.0) + 0.001 * k,
                "Temperature_measured": np.linspace(24.0, 38.0 + k % 3, 30),
                "Time": np.arange(30.0),
                "Capacity": np.array([]) if cap is None or np.isnan(cap) else cap,
            }
        elif kind == "charge":
            ops[0, k]["data"] = {
                "Voltage_measured": np.linspace(3.5, 4.2, 10),
                "Current_measured": np.full(10, 1.5),
                "Temperature_measured": np.full(10, 25.0),
                "Time": np.arange(10.0),
            }
        else:
            ops[0, k]["data"] = {"Sense_current": np.ones(5), "Battery_impedance": np.ones(5)}
    savemat(path, {cell: {"cycle": ops}})


def nasa_archive(folder: Path) -> dict[str, list[float]]:
    """The NASA download's layout: a zip holding a zip per experiment, each holding B00xx.mat."""
    import zipfile

    rng = np.random.default_rng(5)
    cells = {
        c: list(1.9 - 0.004 * np.arange(n) + rng.normal(0, 0.002, n))
        for c, n in (("B0005", 40), ("B0006", 36), ("B0033", 30))
    }
    cells["B0006"][3] = float("nan")  # a discharge without a recorded capacity (empty array in the file)
    work = folder / "work"
    work.mkdir()
    inner = []
    for group, members in (("1. BatteryAgingARC-FY08Q4", ["B0005", "B0006"]), ("3. BatteryAgingARC_25-44", ["B0033"])):
        zpath = work / f"{group}.zip"
        with zipfile.ZipFile(zpath, "w") as z:
            for cell in members:
                nasa_cell_file(work / f"{cell}.mat", cell, cells[cell])
                z.write(work / f"{cell}.mat", f"{cell}.mat")
        inner.append(zpath)
    with zipfile.ZipFile(folder / bs.NASA.files[0].filename, "w") as z:
        for zpath in inner:
            z.write(zpath, f"5. Battery Data Set/{zpath.name}")
        z.writestr("5. Battery Data Set/README.txt", "generated for tests")
    return cells


def test_nasa_fetch_convert_and_dataset(server, tmp_path):
    cells = nasa_archive(server.root)
    out = bs.fetch("nasa-pcoe", mirror=server.url, progress=False)
    frame = pl.read_parquet(out)
    assert list(frame.columns) == list(bs.NASA_COLUMNS)
    assert frame.group_by("cell_id").len().sort("cell_id").rows() == [("B0005", 40), ("B0006", 36), ("B0033", 30)]
    b5 = frame.filter(pl.col("cell_id") == "B0005").sort("cycle")
    np.testing.assert_allclose(b5["capacity_ah"].to_numpy(), cells["B0005"], rtol=0, atol=1e-12)
    assert b5["operation_index"].to_list()[:3] == [2, 5, 8]  # discharges interleaved with charge/impedance
    assert b5["start_time"][0] == "2008-04-02T13:09:18.921000"
    assert b5["ambient_temperature_c"][0] == 24.0 and b5["mean_current_a"][0] == pytest.approx(-2.0 + 0.001)
    assert frame.filter(pl.col("cell_id") == "B0006")["capacity_ah"].is_nan().sum() == 1
    # the registered dataset: default cells are the classic four (here B0005, B0006 exist)
    ds = datasets.load("battery-nasa", mirror=server.url)
    assert ds.name == "battery-nasa" and ds.group == "cell_id" and sorted(ds.groups) == ["B0005", "B0006"]
    assert ds.frame.filter(pl.col("cell_id") == "B0006").height == 35  # the empty capacity dropped
    everything = datasets.load("battery-nasa", cells="all")
    assert sorted(everything.groups) == ["B0005", "B0006", "B0033"]
    # the converted table is cached: a refresh is the only thing that downloads again
    n = len(server.requests)
    datasets.load("battery-nasa", cells="B0033")
    assert len(server.requests) == n


def test_nasa_damaged_file_is_a_format_error(tmp_path):
    bad = tmp_path / "B0007.mat"
    bad.write_bytes(b"MATLAB 5.0 MAT-file, but nothing after the header")
    with pytest.raises(DataFormatError, match="B0007"):
        bs.convert_nasa([bad])
    with pytest.raises(DataFormatError, match="neither a zip nor"):
        bs.convert_nasa([tmp_path / "notes.txt"] if (tmp_path / "notes.txt").write_text("x") else [])


# ----------------------------------------------------------------------------- Severson (HDF5)
MATLAB_HEADER = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Tue Jan 29 2019 HDF5 schema 1.00 ."


def _char(refs, name: str, text: str):
    d = refs.create_dataset(name, data=np.array([[ord(c)] for c in text], dtype=np.uint16))
    d.attrs["MATLAB_class"] = np.bytes_("char")
    d.attrs["MATLAB_int_decode"] = np.int32(2)
    return d.ref


def severson_batch_file(path: Path, cells: list[dict]) -> None:
    """A batch file in the published layout: 512-byte MATLAB user block; group 'batch' of (n, 1)
    object-reference datasets (summary, cycles, cycle_life, policy_readable, barcode, channel_id,
    Vdlin) whose targets live in '#refs#': a summary is a group of (1, n_cycles) arrays, cycles a
    group of (n_cycles, 1) references to per-cycle series, text uint16 character codes."""
    import h5py

    ref_dtype = h5py.special_dtype(ref=h5py.Reference)
    with h5py.File(path, "w", userblock_size=512) as f:
        refs = f.create_group("#refs#")
        batch = f.create_group("batch")
        batch.attrs["MATLAB_class"] = np.bytes_("struct")
        columns = {
            k: [] for k in ("summary", "cycles", "cycle_life", "policy_readable", "barcode", "channel_id", "Vdlin")
        }
        for i, cell in enumerate(cells):
            n = len(cell["qd"])
            summary = refs.create_group(f"s{i}")
            summary.attrs["MATLAB_class"] = np.bytes_("struct")
            fields = {
                "cycle": np.arange(1, n + 1, dtype=float),
                "QDischarge": np.asarray(cell["qd"]),
                "QCharge": np.asarray(cell["qd"]) + 0.001,
                "IR": np.full(n, 0.016),
                "Tavg": np.full(n, 31.5),
                "Tmin": np.full(n, 29.9),
                "Tmax": np.full(n, 35.1),
                "chargetime": np.full(n, 13.4),
            }
            for key, value in fields.items():
                summary.create_dataset(key, data=value.reshape(1, n))
            cyc = refs.create_group(f"c{i}")
            for key in ("I", "Qc", "Qd", "Qdlin", "T", "Tdlin", "V", "discharge_dQdV", "t"):
                series = [
                    refs.create_dataset(f"c{i}{key}{j}", data=np.linspace(0, 1, 8).reshape(1, 8)).ref
                    for j in range(min(n, 3))
                ]
                cyc.create_dataset(key, data=np.array(series, dtype=object).reshape(-1, 1), dtype=ref_dtype)
            columns["summary"].append(summary.ref)
            columns["cycles"].append(cyc.ref)
            columns["cycle_life"].append(refs.create_dataset(f"l{i}", data=np.array([[float(cell["life"])]])).ref)
            columns["policy_readable"].append(_char(refs, f"p{i}", cell["policy"]))
            columns["barcode"].append(_char(refs, f"b{i}", cell["barcode"]))
            columns["channel_id"].append(_char(refs, f"h{i}", str(i + 1)))
            columns["Vdlin"].append(refs.create_dataset(f"v{i}", data=np.linspace(3.5, 2.0, 1000).reshape(1000, 1)).ref)
        for key, values in columns.items():
            batch.create_dataset(key, data=np.array(values, dtype=object).reshape(-1, 1), dtype=ref_dtype)
    with open(path, "r+b") as handle:  # MATLAB's text header in the user block, as in the real files
        handle.write(MATLAB_HEADER.ljust(116, b" "))


def _fade(n: int, rng, start: float = 1.07) -> list[float]:
    k = np.arange(n)
    return list(start - 1e-4 * k - 2e-7 * k**2 + rng.normal(0, 2e-4, n))


def severson_files(folder: Path) -> dict[str, dict]:
    rng = np.random.default_rng(11)
    names = [f.filename for f in bs.SEVERSON.files]
    batches = {1: 9, 2: 8, 3: 3}
    made: dict[str, dict] = {}
    for (batch, count), name in zip(batches.items(), names):
        cells = []
        for i in range(count):
            cell = {
                "qd": _fade(40 + 3 * i + 5 * batch, rng),
                "life": 500 + i,
                "policy": f"{3 + batch}.6C(80%)-3.6C",
                "barcode": f"EL1500{batch}{i:02d}",
            }
            made[f"b{batch}c{i}"] = cell
            cells.append(cell)
        severson_batch_file(folder / name, cells)
    return made


def test_severson_real_layout_groups_and_references(tmp_path):
    import h5py

    made = severson_files(tmp_path)
    path = tmp_path / bs.SEVERSON.files[0].filename
    assert path.read_bytes().startswith(b"MATLAB 7.3 MAT-file")
    with h5py.File(path, "r") as f:  # the layout the authors' loading code walks
        batch = f["batch"]
        assert set(batch) == {"summary", "cycles", "cycle_life", "policy_readable", "barcode", "channel_id", "Vdlin"}
        assert batch["summary"].shape == (9, 1) and batch["summary"].dtype == h5py.special_dtype(ref=h5py.Reference)
        summary = f[batch["summary"][4, 0]]
        assert isinstance(summary, h5py.Group) and summary["QDischarge"].shape == (1, len(made["b1c4"]["qd"]))
        assert f[batch["policy_readable"][4, 0]][()].tobytes()[::2].decode() == "4.6C(80%)-3.6C"
        assert isinstance(f[f[batch["cycles"][4, 0]]["V"][0, 0]], h5py.Dataset)
    cells = bs.severson_batch_rows(path, 1)
    assert sorted(cells) == sorted(f"b1c{i}" for i in range(9))
    np.testing.assert_array_equal(cells["b1c4"]["discharge_capacity_ah"], made["b1c4"]["qd"])
    assert cells["b1c4"]["charge_policy"] == "4.6C(80%)-3.6C" and cells["b1c4"]["barcode"] == "EL1500104"
    assert cells["b1c4"]["cycle_life"] == 504.0


def test_severson_fetch_convert_with_the_authors_cleaning(server):
    made = severson_files(server.root)
    out = bs.fetch("severson", mirror=server.url, progress=False)
    frame = pl.read_parquet(out)
    assert list(frame.columns) == list(bs.SEVERSON_COLUMNS)
    ids = set(frame["cell_id"].unique())
    # removed as in the authors' code: b1c8 (never reaches 80 %), b3c2 (noisy channel); b2c7 joined to b1c0
    assert "b1c8" not in ids and "b3c2" not in ids and "b2c7" not in ids
    assert ids == {f"b1c{i}" for i in range(8)} | {f"b2c{i}" for i in range(7)} | {"b3c0", "b3c1"}
    b1c0 = frame.filter(pl.col("cell_id") == "b1c0").sort("cycle")
    n0, n7 = len(made["b1c0"]["qd"]), len(made["b2c7"]["qd"])
    assert b1c0.height == n0 + n7
    assert b1c0["cycle"].to_list() == list(range(1, n0 + n7 + 1))
    np.testing.assert_array_equal(b1c0["discharge_capacity_ah"].to_numpy(), made["b1c0"]["qd"] + made["b2c7"]["qd"])
    assert b1c0["cycle_life"][0] == 500 + 662 and b1c0["batch"][0] == 1  # the authors' add_len for b1c0
    raw = bs.convert_severson([server.root / f.filename for f in bs.SEVERSON.files], authors_cleaning=False)
    assert raw["cell_id"].n_unique() == 20


def test_battery_severson_dataset_groups_cells_by_batch(server):
    severson_files(server.root)
    ds = datasets.load("battery-severson", mirror=server.url)
    assert ds.name == "battery-severson" and ds.group == "cell_id"
    by_split = ds.frame.group_by("split").agg(pl.col("cell_id").unique())
    train_cells = set(by_split.filter(pl.col("split") == "train")["cell_id"].explode())
    assert train_cells and not any(c.startswith("b3") for c in train_cells), "batch 3 is held out whole"
    assert {"b3c0", "b3c1"} <= set(ds.frame["cell_id"])
    two = datasets.load("battery-severson", batches="1", test_cells="b1c7")
    assert set(two.frame["cell_id"].unique()) == {f"b1c{i}" for i in range(8)}
    # test_cells="none" holds no cell out (batch 3 is not filled in behind the user's back)
    kept = datasets.load("battery-severson", test_cells="none")
    assert "b3c0" in set(kept.frame.filter(pl.col("split") == "train")["cell_id"])
    assert kept.frame.filter(pl.col("split") == "test_fit").height == 0
    with pytest.raises(DataFormatError, match="batches must be batch numbers"):
        datasets.load("battery-severson", batches="one")


def test_dataset_options_are_typed_and_unknown_names_listed():
    d = datasets.definition("battery-severson")
    parsed = options.parse(d, ["train_fraction=0.6", "refresh=yes", "batches=1,2", "test-cells=b2*"])
    assert parsed == {"train_fraction": 0.6, "refresh": True, "batches": "1,2", "test_cells": "b2*"}
    with pytest.raises(options.DatasetOptionError, match=r"no option trian_fraction; valid options: batches, "):
        options.parse(d, ["trian_fraction=0.6"])
    with pytest.raises(options.DatasetOptionError, match="expected a number"):
        options.parse(d, ["train_fraction=most"])
    with pytest.raises(options.DatasetOptionError, match="KEY=VALUE"):
        options.parse(d, ["train_fraction"])
    enso = datasets.definition("enso-nino34")
    assert options.parse(enso, ["train_end_year=1985", "source=cpc-sstoi"]) == {
        "train_end_year": 1985,
        "source": "cpc-sstoi",
    }
