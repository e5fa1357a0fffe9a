"""Retention's settings are app settings like every other `AUTOMEMORY_*` one."""

import pytest

from automemory import conf
from automemory.checks import automemory_settings_check
from automemory.services import retention


def test_the_defaults_live_in_the_app_settings():
    assert conf.DEFAULTS["RETENTION_BATCH_SIZE"] == 500
    assert conf.DEFAULTS["RETENTION_INTERVAL_SECONDS"] == 3600
    assert retention.retention_batch_size() == 500
    assert retention.retention_interval_seconds() == 3600.0


def test_the_pass_reads_the_app_default_when_no_setting_overrides_it(monkeypatch):
    monkeypatch.setitem(conf.DEFAULTS, "RETENTION_BATCH_SIZE", 7)
    monkeypatch.setitem(conf.DEFAULTS, "RETENTION_INTERVAL_SECONDS", 90)
    assert retention.retention_batch_size() == 7
    assert retention.retention_interval_seconds() == 90.0


def test_django_settings_override_the_defaults(settings):
    settings.AUTOMEMORY_RETENTION_BATCH_SIZE = 3
    settings.AUTOMEMORY_RETENTION_INTERVAL_SECONDS = 60
    assert retention.retention_batch_size() == 3
    assert retention.retention_interval_seconds() == 60.0


@pytest.mark.parametrize("name", ["RETENTION_BATCH_SIZE", "RETENTION_INTERVAL_SECONDS"])
def test_a_non_positive_retention_setting_is_refused(settings, name):
    setattr(settings, f"AUTOMEMORY_{name}", 0)
    assert [problem.id for problem in automemory_settings_check()] == ["automemory.E003"]
