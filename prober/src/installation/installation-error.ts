/** A problem with the installation (its home, marker key or settings): a usage error, never an internal one. */
export class InstallationError extends Error {
  override readonly name = 'InstallationError';
}
