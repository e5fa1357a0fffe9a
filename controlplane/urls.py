from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from controlplane import health, metrics

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="api-docs", permanent=False)),
    path("admin/", admin.site.urls),
    path("console/", include("automemory.console.urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("api/schema", SpectacularAPIView.as_view(), name="schema"),
    # The split view serves its start-up script as a file (?script): no inline script (CSP).
    # Swagger UI sets inline styles as it renders, so its page alone allows inline style.
    path(
        "api/docs",
        csp_update({"style-src": ["'unsafe-inline'"]})(
            SpectacularSwaggerSplitView.as_view(url_name="schema")
        ),
        name="api-docs",
    ),
    path("", include("controlplane.api.urls")),
    path("", include("automemory.api.urls")),
]

# Under /console/ the console's own error pages (with its navigation); Django's elsewhere.
handler403 = "automemory.console.views.forbidden"
handler404 = "automemory.console.views.not_found"
