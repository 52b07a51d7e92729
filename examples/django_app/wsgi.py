"""The example's WSGI entry point, for a real server (run from this folder)::

gunicorn -w 4 wsgi:application
"""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "settings")
application = get_wsgi_application()
