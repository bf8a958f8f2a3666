"""lakefuse: the lakeFS model (Git-like version control over an object store) as a Python
package whose main face is a FUSE filesystem.  See README.md for the architecture."""

__version__ = "0.1.0"
