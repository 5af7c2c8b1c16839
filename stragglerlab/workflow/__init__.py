"""The workflow floor: the sampled job population and the validated workflow config."""
