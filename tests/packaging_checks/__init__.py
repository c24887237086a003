"""What a non-editable install ships: the package layout, and the installed copy run from outside the checkout."""
