// The API reference viewer, fed the service's own OpenAPI document; everything it needs is
// served by the service (no fonts, proxy or telemetry from elsewhere).
Scalar.createApiReference('#reference', {
  url: '/openapi.json',
  withDefaultFonts: false,
  hideClientButton: true,
  telemetry: false,
});
