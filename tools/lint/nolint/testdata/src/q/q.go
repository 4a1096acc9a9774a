package q

func f() {
	len := 1 // want `len shadows`
	_ = len

	//nolint:predeclared // kept: the marker above the line covers it
	cap := 2
	_ = cap

	new := 3 //nolint:predeclared // kept: the marker on the line covers it
	_ = new
	min := 4 // want `min shadows`
	_ = min

	/* want `//nolint:predeclared needs a reason` */ //nolint:predeclared
	max := 5                                         // want `max shadows`
	_ = max

	//nolint:errcheck // names another analyzer: no effect here
	clear := 6 // want `clear shadows`
	_ = clear
}
