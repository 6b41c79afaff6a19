// Anchor translation unit for the libtorch precompiled header.
