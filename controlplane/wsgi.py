"""The WSGI application: `gunicorn controlplane.wsgi` (Procfile, `manage.py run_main`)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
application = get_wsgi_application()
