"""Which test runs each command the README shows (tests/unit/test_readme.py reads this).

A test *runs* a command when it starts that program with those options, as a user would,
against the simulated cluster: the sim's hostfile, ssh config and report paths stand in for the
README's `hostfile` and `reports/`, and the test may add what only a test needs (`--ssh-config`
of the sim, its own `--junitxml`, `-q -rA`, `-p no:cacheprovider`, a selection with `-m`/`-k`
that keeps the run short, `python -m pytest` for `pytest`). A test that only collects (`--co`),
or that starts the command and kills it, does not run it.

Keys are the commands as test_readme extracts them (comments cut, spaces collapsed); values are
`path::test_name` from the repository root.
"""

from __future__ import annotations

COMMANDS: dict[str, tuple[str, ...]] = {
    "cluster-tests -- deepspeed --hostfile hostfile train.py --deepspeed ds_config.json": (
        "tests/e2e/test_e2e_launch_command.py::test_code_not_synced_is_one_red_per_node_naming_the_path",
    ),
    'cluster-tests -m "not collective and not training" -- deepspeed --hostfile hostfile '
    'train.py --deepspeed ds_config.json': (
        "tests/e2e/test_e2e_launch_command.py::test_code_not_synced_is_one_red_per_node_naming_the_path",
        "tests/e2e/test_e2e_launch_command.py::test_on_the_rank0_node_with_no_options_green_then_the_launch_itself",
    ),
    "cluster-tests --then-launch -- deepspeed --hostfile hostfile train.py": (
        "tests/e2e/test_e2e_launch_command.py::test_on_the_rank0_node_with_no_options_green_then_the_launch_itself",
        "tests/e2e/test_e2e_launch_command.py::"
        "test_a_breaking_line_in_the_launch_directorys_deepspeed_env_is_one_launch_wide_red",
    ),
    "make demo": (
        "tests/e2e/test_e2e_readme.py::"
        "test_make_demo_is_green_and_ends_with_the_verdict_and_the_launch_line",
    ),
    ".venv/bin/python -m fixtures.sim up --nodes 3 --state .sim/dev": (
        "tests/e2e/test_e2e_readme.py::"
        "test_the_developing_commands_bring_up_a_cluster_check_it_and_leave_nothing",
    ),
    'pytest --hostfile hostfile -m "not collective and not training" '
    '--junitxml=reports/junit.xml': (
        "tests/e2e/test_e2e_foundation.py::test_healthy_cluster_is_green",
    ),
    "bash reports/fixes.sh": (
        "tests/e2e/test_e2e_fixes.py::"
        "test_faults_fixed_by_the_script_then_lf_is_green_and_a_rerun_changes_nothing",
        "tests/e2e/test_e2e_fixes.py::"
        "test_the_127_0_1_1_line_is_healed_by_the_script_with_a_backup_once",
        "tests/e2e/test_e2e_jit.py::"
        "test_stale_lock_red_once_the_launch_hangs_fixes_sh_removes_it_then_all_green",
    ),
    "pytest --hostfile hostfile --lf": (
        "tests/e2e/test_e2e_fixes.py::"
        "test_faults_fixed_by_the_script_then_lf_is_green_and_a_rerun_changes_nothing",
        "tests/e2e/test_e2e_xdist.py::test_last_failed_reruns_only_the_failed_ids",
        "tests/e2e/test_e2e_one_cause.py::test_dead_node_is_one_red_and_the_others_launch_now",
    ),
    "cluster-tests history": (
        "tests/unit/test_after_verdict.py::"
        "test_cluster_tests_history_prints_the_file_and_names_a_bad_one",
    ),
    "pytest --hostfile hostfile --site-checks test_site.py": (
        "tests/e2e/test_e2e_site.py::test_site_check_failing_on_one_node_is_red_for_that_node_only",
    ),
    '.venv/bin/pytest --hostfile .sim/dev/hostfile --ssh-config .sim/dev/ssh_config -m "not '
    'collective and not training"': (
        "tests/e2e/test_e2e_readme.py::"
        "test_the_developing_commands_bring_up_a_cluster_check_it_and_leave_nothing",
    ),
    ".venv/bin/python -m fixtures.sim down --state .sim/dev": (
        "tests/unit/test_sim.py::test_crashed_up_is_cleaned_by_down",
        "tests/e2e/test_e2e_readme.py::"
        "test_the_developing_commands_bring_up_a_cluster_check_it_and_leave_nothing",
    ),
}

#: commands no test can run, with why: `make test` is the run of every test itself (CI runs it
#: on a clean clone)
NOT_A_TEST: dict[str, str] = {
    "make test": "the project's whole test run; CI runs it on a clean clone",
}
