"""`faultfinder ui`: a local, read-only web UI over traces, attributions, CHIEF graphs,
replays, DoVer results and evaluations (optional extra `ui`). See docs/ui.md."""

from faultfinder.ui.app import UIConfig, create_app
from faultfinder.ui.catalog import Catalog
from faultfinder.ui.scan import build_catalog

__all__ = ["Catalog", "UIConfig", "build_catalog", "create_app"]
