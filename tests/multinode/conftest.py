"""A multinode test file whose every test skipped (the machine forbids simulated nodes) exits 77,
which ctest reports as skipped (SKIP_RETURN_CODE) instead of passed."""


def pytest_sessionfinish(session, exitstatus):
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or exitstatus != 0:
        return
    stats = reporter.stats
    if stats.get("skipped") and not stats.get("passed") and not stats.get("failed"):
        session.exitstatus = 77
