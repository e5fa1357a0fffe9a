"""`manage.py demo_setup`: the demo user and project, and a new demo API token printed last."""

from django.core.management.base import BaseCommand

from controlplane.services.demo import DEMO_PASSWORD_FILE, DEMO_TOKENS_KEPT, demo_setup


class Command(BaseCommand):
    help = (
        "Create (or find) the demo user (a superuser whose password is generated once into "
        f"var/{DEMO_PASSWORD_FILE}) and its project "
        "'demo'; mint a new API token named 'demo' and print it as the last line (the "
        f"{DEMO_TOKENS_KEPT} newest demo tokens stay valid, older ones are revoked)."
    )

    def handle(self, *args, **options):
        demo = demo_setup()
        self.stdout.write(
            f"Demo user {demo.user.username} (password {demo.password}), "
            f"project {demo.project.name!r} (id {demo.project.pk})."
        )
        self.stdout.write(demo.token)
