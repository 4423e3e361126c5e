package exported

import (
	"go/ast"
	"go/token"
)

// A Name is one exported name a file declares.
type Name struct {
	// Name is the name as a user writes it after the package's: "F", "T",
	// "T.M" for a method or an interface's method, "T.F" for a field.
	Name string
	Pos  token.Pos // where it is declared
	// Member says the name is a struct's field or an interface's method,
	// which the type's doc comment may cover, as go doc shows them in it.
	Member bool
	// Doc says the name has a doc comment: its own, its declaration
	// group's (a const or var block), or one at the end of its line.
	Doc bool
}

// Names returns the exported names f declares, in the file's order.
func Names(f *ast.File) []Name {
	var names []Name
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			names = append(names, funcName(d)...)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				names = append(names, specNames(d, spec)...)
			}
		}
	}
	return names
}

// funcName lists d, an exported function or an exported method of an
// exported type; nothing otherwise.
func funcName(d *ast.FuncDecl) []Name {
	if !d.Name.IsExported() {
		return nil
	}
	name := d.Name.Name
	if d.Recv != nil {
		recv := recvType(d.Recv.List[0].Type)
		if !ast.IsExported(recv) {
			return nil
		}
		name = recv + "." + name
	}
	return []Name{{Name: name, Pos: d.Name.Pos(), Doc: d.Doc != nil}}
}

// specNames lists the exported names of spec, a spec of the group d, and
// the members of an exported type.
func specNames(d *ast.GenDecl, spec ast.Spec) []Name {
	var names []Name
	switch s := spec.(type) {
	case *ast.ValueSpec:
		doc := d.Doc != nil || s.Doc != nil || s.Comment != nil
		for _, n := range s.Names {
			if n.IsExported() {
				names = append(names, Name{Name: n.Name, Pos: n.Pos(), Doc: doc})
			}
		}
	case *ast.TypeSpec:
		if s.Name.IsExported() {
			doc := d.Doc != nil || s.Doc != nil || s.Comment != nil
			names = append(names, Name{Name: s.Name.Name, Pos: s.Name.Pos(), Doc: doc})
			names = append(names, members(s.Name.Name, s.Type)...)
		}
	}
	return names
}

// members lists the exported fields of a struct type and the exported
// methods of an interface type named typ.
func members(typ string, expr ast.Expr) []Name {
	var list *ast.FieldList
	switch t := expr.(type) {
	case *ast.StructType:
		list = t.Fields
	case *ast.InterfaceType:
		list = t.Methods
	default:
		return nil
	}
	var names []Name
	for _, field := range list.List {
		for _, n := range field.Names {
			if n.IsExported() {
				names = append(names, Name{Name: typ + "." + n.Name, Pos: n.Pos(), Member: true,
					Doc: field.Doc != nil || field.Comment != nil})
			}
		}
	}
	return names
}

// recvType is the name of a method's receiver type: T of T, *T, T[P].
func recvType(expr ast.Expr) string {
	switch t := expr.(type) {
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	case *ast.Ident:
		return t.Name
	}
	return ""
}
