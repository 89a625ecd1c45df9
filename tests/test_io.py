"""harness.io: the name rule, paths that stay under their root, the disk-full message, quoting, and locks."""

import errno
import os

import pytest

from harness.io import RunLock, atomic_write_stream, check_name, path_under, quote


@pytest.mark.parametrize("name", ["hom", "het_t1.3_s0", "cifar10n", "A-1", "x" * 128])
def test_plain_names_pass(name):
    assert check_name(name, "name") == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", "../x", "a/b", "a\\b", "/abs", ".hidden", "-x", "a..b", "my run", "x" * 129, "é", None, 3]
)
def test_names_that_are_not_one_plain_folder_name_are_refused(name):
    with pytest.raises(ValueError, match="must be a plain name"):
        check_name(name, "method name")


def test_path_under_refuses_a_link_that_leads_out_of_its_root(tmp_path):
    root, outside = tmp_path / "runs", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    assert path_under(root, "exp", "upstream", "hom_s0") == root / "exp" / "upstream" / "hom_s0"
    (root / "exp").symlink_to(outside)
    with pytest.raises(ValueError, match="leads outside"):
        path_under(root, "exp", "upstream")


def test_a_full_disk_inside_torch_save_gives_the_disk_full_message_and_leaves_nothing(tmp_path):
    def write(f):  # what torch.save does when its writer hits ENOSPC: a RuntimeError raised while handling it
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    with pytest.raises(OSError, match=r"disk full while writing .*last\.pt: free some space") as e:
        atomic_write_stream(tmp_path / "last.pt", write)
    assert e.value.errno == errno.ENOSPC and not list(tmp_path.iterdir())
    with pytest.raises(RuntimeError, match="unrelated"):  # any other error is left as it is
        atomic_write_stream(tmp_path / "last.pt", lambda f: (_ for _ in ()).throw(RuntimeError("unrelated")))


@pytest.mark.parametrize(
    "code, said",
    [
        (errno.ENOSPC, r"disk full while writing .*: free some space and run"),
        (errno.EDQUOT, r"disk quota exceeded while writing .*: free some space under your quota"),
        (
            errno.EFBIG,
            r"file-size limit reached while writing .*: .*ulimit -f unlimited.*write to another disk and run",
        ),
    ],
)
def test_every_error_of_a_write_out_of_room_is_named_with_its_fix(tmp_path, code, said):
    def write(f):  # torch.save's way: the OSError, then a RuntimeError raised while handling it
        try:
            raise OSError(code, os.strerror(code))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    for writer in (write, lambda f: (_ for _ in ()).throw(OSError(code, os.strerror(code)))):  # and the OSError alone
        with pytest.raises(OSError, match=said + r".* the same command again") as e:
            atomic_write_stream(tmp_path / "x.bin", writer)
        assert e.value.errno == code and "x.bin" in str(e.value) and not list(tmp_path.iterdir())


def test_a_real_file_size_limit_is_named_not_a_signal(tmp_path):
    """``ulimit -f``: the write past the limit fails with EFBIG (Python ignores SIGXFSZ, which would kill it)."""
    import subprocess
    import sys

    code = (
        "import resource; from harness.io import atomic_write_bytes; "
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.getrlimit(resource.RLIMIT_FSIZE)[1])); "
        f"atomic_write_bytes({str(tmp_path / 'big.bin')!r}, bytes(100_000))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 1 and "file-size limit reached while writing" in res.stderr and "big.bin" in res.stderr
    assert not list(tmp_path.iterdir())


def test_quote_keeps_a_few_hundred_characters():
    assert quote("short") == "short"
    text = quote("x" * 10_000)
    assert len(text) < 340 and text.endswith("(9700 more characters)")


def test_a_lock_left_by_a_dead_holder_is_taken_over_with_a_message(tmp_path, capsys):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / ".lock.pid").write_text("PID 999999, harness upstream, since 2026-01-01 00:00:00\n")
    with RunLock(folder):
        assert f"PID {os.getpid()}" in (folder / ".lock.pid").read_text()
    assert "taking over the lock of a process that is gone (PID 999999" in capsys.readouterr().err
    assert not (folder / ".lock.pid").exists()  # a holder that ends normally leaves no PID file
    with RunLock(folder):
        pass
    assert "taking over" not in capsys.readouterr().err


def test_a_lock_removes_only_its_own_writers_temporaries_never_a_neighbours_or_a_users(tmp_path):
    """Audit N05/N05b: an output folder that is the parent of another run's folder lost that run's in-flight
    checkpoint, and the user's .notes.tmp and sub/.draft.tmp vanished."""
    parent = tmp_path / "race"
    neighbour = parent / "a" / "checkpoints"
    neighbour.mkdir(parents=True)
    (parent / "a" / ".lock").write_text("")
    in_flight = neighbour / ".last.pt.4im1kov4.tmp"  # another run's checkpoint being written
    in_flight.write_bytes(b"half a checkpoint")
    (parent / "sub").mkdir()
    users = [parent / ".notes.tmp", parent / "sub" / ".draft.tmp", parent / "sub" / ".x.abcdefgh.tmp"]
    for f in users:
        f.write_text("mine")
    orphan = parent / ".config.yaml.k2j4h6g8.tmp"  # a killed atomic write of this folder's own writer
    orphan.write_text("half")
    with RunLock(parent):
        assert not orphan.exists()
        assert in_flight.read_bytes() == b"half a checkpoint"
        assert all(f.read_text() == "mine" for f in users)


def test_a_lock_cleans_the_writers_own_subfolder_unless_another_writer_holds_it(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    orphan = run / "checkpoints" / ".last.pt.abcd1234.tmp"
    orphan.write_bytes(b"half")
    deeper = run / "checkpoints" / "old" / ".last.pt.abcd1234.tmp"
    deeper.parent.mkdir()
    deeper.write_bytes(b"below")
    with RunLock(run, subfolders=("checkpoints",)):
        assert not orphan.exists() and deeper.exists()
    orphan.write_bytes(b"half")
    (run / "checkpoints" / ".lock").write_text("")  # a run folder of its own: not this writer's
    with RunLock(run, subfolders=("checkpoints",)):
        assert orphan.exists()


@pytest.mark.parametrize(
    "value",
    ["pipe:touch x; echo /x.tar", "gs://bucket/x.tar", "s3://b/x", "hf://d/x", "sftp://h/x", "/data/x.tar::pipe:cat y"],
)
def test_locations_with_another_url_scheme_are_refused_by_name(value):
    from harness.io import check_location

    with pytest.raises(ValueError, match=r"data\.path .* URL, which the harness does not open"):
        check_location(value, "data.path")


@pytest.mark.parametrize(
    "value", [None, "/data/x", "rel/x.tar", "./a:b", "file:///data/x", "http://h/x.tar", "https://h/{000..009}.tar"]
)
def test_local_paths_and_documented_schemes_pass(value):
    from harness.io import check_location

    assert check_location(value, "data.path") == value


@pytest.mark.parametrize("value", ["runs/a\nb", "runs/a\tb", "x\r", "a\x00b", "http://h/x\x7f.tar"])
def test_locations_with_a_control_character_are_refused_by_name(value):
    """audit12 A12-13: a newline, tab, carriage return, NUL or DEL in a path setting, named with the key."""
    from harness.io import check_location

    with pytest.raises(ValueError, match=r"output_dir '.*' holds the control character .*remove it"):
        check_location(value, "output_dir")


def test_path_settings_of_a_run_expand_home_and_refuse_a_dollar():
    """audit12 A12-10: data.cache_dir and data.path get output_dir's rule (a leading ~ expanded, a $ refused)."""
    import os

    from harness.data.config import DataConfig

    d = DataConfig(cache_dir="~/c", path="~/imgs")
    assert (d.cache_dir, d.path) == (os.path.expanduser("~/c"), os.path.expanduser("~/imgs"))
    assert DataConfig(path="http://h/x.tar").path == "http://h/x.tar"
    with pytest.raises(ValueError, match=r"data\.cache_dir='\$HOME/c' holds a \$"):
        DataConfig(cache_dir="$HOME/c")


def test_an_output_folder_of_someone_else_is_refused_and_overwrite_never_replaces(tmp_path):
    from harness.io import check_output_folder

    out = tmp_path / "out"
    assert check_output_folder(out, False, ("model.pt",), False, "harness upstream", "output_dir") == out  # new
    out.mkdir()
    (out / ".lock.pid").write_text("")  # a lock of ours only: as empty
    check_output_folder(out, False, ("model.pt",), False, "harness upstream", "output_dir")
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files harness upstream did not write \(notes\.txt\).*--overwrite"):
        check_output_folder(out, False, ("model.pt",), False, "harness upstream", "output_dir")
    (out / "model.pt").write_text("my model")  # a name it writes: --overwrite is not offered, as it would not help
    with pytest.raises(ValueError, match=r"holds model\.pt that harness upstream did not write: even with --overwrite"):
        check_output_folder(out, False, ("model.pt",), False, "harness upstream", "output_dir")
    with pytest.raises(ValueError, match=r"holds model\.pt that harness upstream did not write: even with --overwrite"):
        check_output_folder(out, False, ("model.pt",), True, "harness upstream", "output_dir")
    check_output_folder(out, False, ("run.json",), True, "harness upstream", "output_dir")  # beside, not over
    check_output_folder(out, True, ("model.pt",), False, "harness upstream", "output_dir")  # its own output
    assert (out / "model.pt").read_text() == "my model"


def test_read_json_object_names_a_damaged_file_and_its_fix(tmp_path):
    """Audit 8 Q01/Q02: a truncated metrics.json gave an unnamed JSON error, one holding [] an AttributeError."""
    from harness.io import read_json_object

    path = tmp_path / "metrics.json"
    assert read_json_object(path) is None
    path.write_text('{"top1": 1}')
    assert read_json_object(path) == {"top1": 1}
    for text, problem in (('{"top1": NaN', "is not valid JSON"), ("[]", "holds an array"), ("null", "holds null")):
        path.write_text(text)
        with pytest.raises(ValueError, match=rf"{path} {problem}.*rerun the run, or restore the file"):
            read_json_object(path)
