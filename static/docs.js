// The API reference viewer, fed the service's own OpenAPI document; everything it needs is
// served by the service (no fonts, proxy or telemetry from elsewhere), none of the viewer's
// cloud features (its AI agent, MCP generator, developer tools with deploy), and request
// samples addressed to this service.
Scalar.createApiReference('#reference', {
  url: '/openapi.json',
  withDefaultFonts: false,
  hideClientButton: true,
  telemetry: false,
  agent: { disabled: true },
  mcp: { disabled: true },
  showDeveloperTools: 'never',
  servers: [{ url: window.location.origin, description: 'This service' }],
});
