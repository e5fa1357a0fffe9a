import pytest

from automemory.models import AutoMemorySettings


@pytest.fixture
def enable_auto_memory(db):
    """Turn auto memory on for a user, with any settings overridden."""

    def enable(user, **overrides):
        values = {"generate_memories": True, "use_memories": True, **overrides}
        settings, _ = AutoMemorySettings.objects.update_or_create(user=user, defaults=values)
        return settings

    return enable
