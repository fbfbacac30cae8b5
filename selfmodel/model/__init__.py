"""What a self-model is: the kinematic chain it is posed by, its networks, the model types, the baked
grids that answer queries fast, and the folder a trained model is saved in."""
