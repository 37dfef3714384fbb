/** The checkout scripts/bundle.mjs belongs to. */
export declare const checkout: string

export interface BundleOptions {
  /** The project the sources are in; the checkout by default. */
  readonly root?: string
  /** The cache's directory under `<root>/.data/`. */
  readonly name: string
  /** The word the build's one line on stderr starts with. */
  readonly label: string
  /** Bundle name → entry file, relative to the root. */
  readonly entries: Readonly<Record<string, string>>
  /** The source folders (relative to the root) the freshness hash covers. */
  readonly directories: ReadonlyArray<string>
  /** The file of the script that calls `prepareBundle`: a change to it rebuilds too. */
  readonly launcher: string
}

/** The directory of an up-to-date bundle, built first if the sources changed since the last build. */
export declare const prepareBundle: (options: BundleOptions) => Promise<string>

/** Imports the bundle's `entry` with Node's compile cache on. */
export declare const importBundle: (outdir: string, entry: string) => Promise<Record<string, unknown>>
