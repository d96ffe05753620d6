"""A Django application (no database) for gunicorn, profiled by samprof's
middleware, its routes named by samprof.django.RouteMiddleware.

/items/<int:n>/ and /pages/<slug:name>/ burn about 20 and 10 ms of CPU;
each answer is the CPU the view used (time.thread_time), the truth the
test compares the profiles with. Environment: SAMPROF_TEST_PROFILE_DIR.
"""

from __future__ import annotations

import os

from django.conf import settings

settings.configure(
    DEBUG=False,
    SECRET_KEY="samprof-test",
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    MIDDLEWARE=["samprof.django.RouteMiddleware"],
    INSTALLED_APPS=[],
    DATABASES={},
)

from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402
from support.workloads import burn_cpu  # noqa: E402

import samprof.wsgi  # noqa: E402


def item_view(request, n):
    return HttpResponse(f"{burn_cpu(0.02):.9f}\n")


def page_view(request, name):
    return HttpResponse(f"{burn_cpu(0.01):.9f}\n")


urlpatterns = [
    path("items/<int:n>/", item_view),
    path("pages/<slug:name>/", page_view),
]

app = samprof.wsgi.ProfilerMiddleware(
    get_wsgi_application(),
    profile_dir=os.environ["SAMPROF_TEST_PROFILE_DIR"],
    hz=1000,
)
