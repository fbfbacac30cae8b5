"""What the recordings say about space: labelled points from depth images, what the cameras saw
through, and the geometry the description (URDF meshes, a declared board) puts on each link."""
