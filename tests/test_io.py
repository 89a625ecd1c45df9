"""harness.io: the name rule, paths that stay under their root, the disk-full message, quoting, and locks."""

import errno
import os

import pytest

from harness.io import RunLock, atomic_write_stream, check_name, path_under, quote


@pytest.mark.parametrize("name", ["hom", "het_t1.3_s0", "cifar10n", "A-1", "x" * 128])
def test_plain_names_pass(name):
    assert check_name(name, "name") == name


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "a\\b", "/abs", ".hidden", "-x", "a..b", "my run",
                                  "x" * 129, "é", None, 3])
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
