//! The dashboard: axum routes, HTML and SVG charts drawn from plain view types. It never depends on `monitor`.
