"""Ctrl-C's mechanics, each on its own: the guard against a second Ctrl-C, the main thread that
never runs paramiko, and the script that ends a run's processes on a node (run here for real).
End to end, at every long phase of a run: tests/e2e/test_e2e_interrupt.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from cluster_tests.core import transport
from cluster_tests.core.interrupt import AGAIN, FIRST, InterruptGuard


def test_the_first_sigint_interrupts_the_later_ones_only_say_so(tmp_path):
    """In a child process (a signal to ourselves would hit pytest): the first SIGINT raises
    KeyboardInterrupt, the second, during the cleanup, does not; uninstall gives SIGINT back."""
    code = f"""
import os, signal, sys, time
sys.path.insert(0, {os.getcwd()!r})
from cluster_tests.core.interrupt import InterruptGuard
guard = InterruptGuard()
assert guard.install()
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted")
    os.kill(os.getpid(), signal.SIGINT)   # during the cleanup
    time.sleep(0.2)
    print("cleaned up")
guard.uninstall()
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
print("restored")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30, check=False,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["interrupted", "cleaned", "up", "restored"]
    assert proc.stderr == FIRST + AGAIN


def test_the_guard_leaves_another_handler_alone():
    def mine(signum, frame):
        return None

    old = signal.signal(signal.SIGINT, mine)
    try:
        guard = InterruptGuard()
        assert not guard.install()
        assert signal.getsignal(signal.SIGINT) is mine
        guard.uninstall()
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, old)


def test_an_interrupt_of_the_main_thread_stops_the_work_it_waits_for():
    """off_main_thread: the work runs in a thread of its own; KeyboardInterrupt in the main
    thread's wait tells it to stop (on_interrupt) and goes on."""
    stop = threading.Event()
    seen: list[str] = []

    def work() -> str:
        seen.append(threading.current_thread().name)
        stop.wait(10)
        return "stopped" if stop.is_set() else "ran out"

    def interrupt_soon() -> None:
        time.sleep(0.3)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # type: ignore[arg-type]

    # Python's own handler, as at a terminal: a job started in the background by a shell
    # without job control (CI's `make test &`) inherits SIGINT ignored, and nothing would raise
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt_soon, daemon=True).start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            transport.off_main_thread(work, "ct-test-work", on_interrupt=stop.set)
    finally:
        signal.signal(signal.SIGINT, old)
    assert time.monotonic() - start < 5
    assert seen == ["ct-test-work"]
    # from any other thread, the work runs right there
    box: list[str] = []
    t = threading.Thread(target=lambda: box.append(
        transport.off_main_thread(lambda: threading.current_thread().name, "unused")),
        name="caller")
    t.start()
    t.join()
    assert box == ["caller"]


def test_errors_of_the_work_reach_the_main_thread():
    def work() -> None:
        raise ValueError("from the work")

    with pytest.raises(ValueError, match="from the work"):
        transport.off_main_thread(work, "ct-test-work")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_leftovers_script_ends_what_carries_the_tag_and_nothing_else():
    """Run here for real: a process with the tag in its command line, one with it only in its
    environment that left its session (as a port listener does), a child of the first in its
    session without the tag; all end. A process with another run's tag lives on."""
    tag, other = "ct-run-0123456789ab", "ct-run-ba9876543210"
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    in_cmdline = subprocess.Popen(["sh", "-c", f"{sys.executable} -c 'import time; "
                                   "time.sleep(60)' & wait", tag], start_new_session=True)
    in_env = subprocess.Popen(sleep, env={**os.environ, transport.RUN_TAG_VAR: tag},
                              start_new_session=True)
    not_ours = subprocess.Popen(sleep, env={**os.environ, transport.RUN_TAG_VAR: other},
                                start_new_session=True)
    try:
        time.sleep(0.5)
        child = int(subprocess.run(["pgrep", "-P", str(in_cmdline.pid)], capture_output=True,
                                   text=True, check=True).stdout.split()[0])
        run = subprocess.run(["sh", "-c", transport.leftovers_script(tag)], capture_output=True,
                             text=True, timeout=30, check=False,
                             env={k: v for k, v in os.environ.items()
                                  if k != transport.RUN_TAG_VAR})
        assert run.returncode == 0, run.stderr
        for p in (in_cmdline, in_env):
            p.wait(timeout=5)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
        assert not_ours.poll() is None
    finally:
        for p in (in_cmdline, in_env, not_ours):
            if p.poll() is None:
                p.kill()
                p.wait()


def _where_the_run_was() -> None:
    InterruptGuard()._handle(signal.SIGINT, None)  # as the handler interrupts a frame


def test_pytest_reports_the_interrupt_where_the_run_was_and_no_more():
    try:
        _where_the_run_was()
    except KeyboardInterrupt:
        excinfo = pytest.ExceptionInfo.from_current()
    full = len(excinfo.traceback)
    assert excinfo.traceback[-1].frame.code.raw is InterruptGuard._handle.__code__
    InterruptGuard().pytest_keyboard_interrupt(excinfo)
    assert len(excinfo.traceback) == 1
    assert excinfo.traceback[-1].name == "_where_the_run_was"
    # --full-trace: every frame but the handler's own
    try:
        _where_the_run_was()
    except KeyboardInterrupt:
        excinfo = pytest.ExceptionInfo.from_current()
    InterruptGuard(fulltrace=True).pytest_keyboard_interrupt(excinfo)
    assert len(excinfo.traceback) == full - 1
    assert excinfo.traceback[-1].name == "_where_the_run_was"


def test_a_login_thread_adds_no_logger_while_pytest_may_walk_them():
    """paramiko's loggers exist before any login thread runs (core/transport.py makes them at
    import): a Transport, made and started in a thread as the pool's logins are, adds no name to
    logging's table, which pytest's logging plugin walks unlocked when collection starts."""
    import logging
    import socket

    import paramiko

    before = set(logging.root.manager.loggerDict)
    a, b = socket.socketpair()
    made: list[paramiko.Transport] = []
    t = threading.Thread(target=lambda: made.append(paramiko.Transport(a)))
    t.start()
    t.join(10)
    try:
        assert made and set(logging.root.manager.loggerDict) - before == set()
        assert set(transport.PARAMIKO_LOGGERS) <= before
    finally:
        for tr in made:
            tr.close()
        a.close()
        b.close()
