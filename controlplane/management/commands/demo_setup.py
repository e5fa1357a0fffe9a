"""`manage.py demo_setup`: the demo user and project, idempotently; prints the token last."""

from django.core.management.base import BaseCommand

from controlplane.services.demo import DEMO_PASSWORD, demo_setup


class Command(BaseCommand):
    help = (
        "Create (or find) the demo user (a superuser with password 'demo') and its project "
        "'demo'; print the demo user's API token as the last line."
    )

    def handle(self, *args, **options):
        demo = demo_setup()
        self.stdout.write(
            f"Demo user {demo.user.username} (password {DEMO_PASSWORD}), "
            f"project {demo.project.name!r} (id {demo.project.pk})."
        )
        self.stdout.write(demo.token)
